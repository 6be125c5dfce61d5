package web

import (
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
)

// The defences the API and the console share (docs/guarantees.md
// ("Security")): the headers every response carries, the host rule of a
// server without API tokens, and reading an Origin header. Each handler
// applies them to its own routes: the server's guard.go to every request,
// the console's to its pages and forms.

// Content security policies: the console's pages load their script,
// style sheet and htmx requests from the server itself, post their forms
// to it, and may not be framed; everything else (JSON, problems) loads
// nothing at all. Inline styles are allowed for the timeline's bar widths
// and htmx's indicator style; inline scripts are not.
const (
	ConsoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
	APICSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
)

// SetHeaders sets the headers every response carries: nosniff, no
// framing, same-origin referrers, and csp as its content security policy.
func SetHeaders(h http.Header, csp string) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" on the console's own form posts.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", csp)
}

// CheckHost refuses, when there are no API tokens, a request whose Host
// is neither a loopback name or address nor one of allowed (names as
// [AllowedHost] normalizes them; "*" for any). With tokens it lets
// everything through: a page that rebinds its DNS name to the server
// holds no token to send.
func CheckHost(r *http.Request, tokens bool, allowed []string) *Problem {
	if tokens || hostAllowed(r.Host, allowed) {
		return nil
	}
	return NewProblem(http.StatusForbidden, CodeHostNotAllowed, "this server has no API tokens and answers only requests for "+
		"localhost, a loopback address or a host of its allowed hosts (cairn server --allowed-hosts, Config.AllowedHosts)")
}

// hostAllowed reports whether host (a Host header, perhaps with a port)
// names the server in tokenless mode.
func hostAllowed(host string, allowed []string) bool {
	name := hostName(host)
	if name == "" {
		return false
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true // RFC 6761: browsers resolve these to loopback themselves
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.ContainsFunc(allowed, func(a string) bool { return a == "*" || a == name })
}

// hostName is the lower-case name of a Host header without its port or
// a trailing dot; "" for a Host that is not one.
func hostName(host string) string {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if ip := net.ParseIP(name); ip != nil {
		return ip.String()
	}
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// AllowedHost normalizes an entry of a configuration's allowed hosts as
// [CheckHost] reads a Host header: lower case, no trailing dot, IPv6
// without brackets. It refuses ports, schemes and paths.
func AllowedHost(h string) (string, bool) {
	h = strings.TrimSpace(h)
	switch {
	case h == "*":
		return h, true
	case h == "" || strings.ContainsAny(h, "/?#@ \t"):
		return "", false
	}
	if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
		return ip.String(), true
	}
	if strings.Contains(h, ":") {
		return "", false
	}
	return strings.TrimSuffix(strings.ToLower(h), "."), true
}

// OriginIsHost reports whether an Origin header names host (the request's
// Host header), port included. The scheme is not compared: behind a
// TLS-terminating proxy the server is reached over http.
func OriginIsHost(origin, host string) bool {
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" && u.Path != "/" {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// ValidPrefix reports whether prefix, not empty, is a mount path: a
// clean path with a leading "/" and no trailing one, of letters, digits
// and "-._~".
func ValidPrefix(prefix string) bool {
	bad := strings.IndexFunc(prefix, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r))
	}) >= 0
	return !bad && prefix[0] == '/' && !strings.HasSuffix(prefix, "/") && path.Clean(prefix) == prefix
}
