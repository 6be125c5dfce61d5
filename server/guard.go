package server

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
)

// The web defences every request passes before its handler (see
// docs/guarantees.md ("Security") for what each one stops):
//
//   - without API tokens, only requests whose Host is a loopback name or
//     address, or one of Config.AllowedHosts, are answered: a page that
//     rebinds its own DNS name to 127.0.0.1 sends its own name as Host;
//   - a write to /v1 must say Content-Type: application/json, which no
//     form and no cross-origin fetch without a CORS preflight can send,
//     and the server answers no preflight;
//   - a write to /v1 that a browser marks as cross-origin
//     (Sec-Fetch-Site, else Origin) is refused;
//   - a console POST must come from one of the console's own pages:
//     Sec-Fetch-Site: same-origin, or, from a browser too old to send
//     that, an Origin whose host is the request's Host; and its body is
//     an application/x-www-form-urlencoded form within the API's limit
//     for the same request, read here (never multipart: nothing is
//     spooled to disk, before or after signing in);
//   - every response says nosniff, same-origin referrers, and a content
//     security policy that, among the rest, forbids framing.

// Content security policies: the console's pages load their script,
// style sheet and htmx requests from the server itself, post their forms
// to it, and may not be framed; everything else (JSON, problems) loads
// nothing at all. Inline styles are allowed for the timeline's bar widths
// and htmx's indicator style; inline scripts are not.
const (
	consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
	apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
)

// guard wraps the whole handler with the defences above.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: under no-referrer a browser sends
		// "Origin: null" on the console's own form posts.
		h.Set("Referrer-Policy", "same-origin")
		if strings.HasPrefix(r.URL.Path, "/console/") || r.URL.Path == "/" {
			h.Set("Content-Security-Policy", consoleCSP)
		} else {
			h.Set("Content-Security-Policy", apiCSP)
		}
		if p := s.checkHost(r); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			var p *Problem
			switch {
			case strings.HasPrefix(r.URL.Path, "/v1/"):
				p = checkJSONBody(r)
				if p == nil {
					p = checkNotCrossOrigin(r)
				}
			case strings.HasPrefix(r.URL.Path, "/console/"):
				p = checkSameOrigin(r)
				if p == nil {
					p = s.readConsoleForm(w, r)
				}
			}
			if p != nil {
				s.writeProblem(w, r, p)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses, when there are no API tokens, a request whose Host
// is neither a loopback name or address nor one of Config.AllowedHosts.
// With tokens it lets everything through: a page that rebinds its DNS
// name to the server holds no token to send.
func (s *Server) checkHost(r *http.Request) *Problem {
	if len(s.tokens) > 0 || s.hostAllowed(r.Host) {
		return nil
	}
	return problem(http.StatusForbidden, codeHostNotAllowed, "this server has no API tokens and answers only requests for "+
		"localhost, a loopback address or a host of its allowed hosts (cairn server --allowed-hosts, Config.AllowedHosts)")
}

// hostAllowed reports whether host (a Host header, perhaps with a port)
// names the server in tokenless mode.
func (s *Server) hostAllowed(host string) bool {
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
	return slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool { return a == "*" || a == name })
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

// checkJSONBody refuses a write to the API that does not say its body is
// JSON (an empty body included): the forms and "simple" cross-origin
// requests a web page can send without asking first are text/plain,
// urlencoded or multipart, or name no type.
func checkJSONBody(r *http.Request) *Problem {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && mt == "application/json" {
		return nil
	}
	return problem(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
		"send Content-Type: application/json (with a body of {} when there is nothing to say)")
}

// checkNotCrossOrigin refuses a request a browser says comes from another
// origin. A request with neither header is not from a browser (curl, the
// SDK's callers) and passes; one from a browser needs
// Content-Type: application/json and so a preflight, which the server
// does not answer.
func checkNotCrossOrigin(r *http.Request) *Problem {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return nil
	case "":
		if origin := r.Header.Get("Origin"); origin == "" || originIsHost(origin, r.Host) {
			return nil
		}
	}
	return problem(http.StatusForbidden, codeCrossOrigin, "a web page of another origin may not write through the API")
}

// checkSameOrigin lets a console POST through only when the browser says
// it comes from one of the server's own pages. A request that says
// neither Sec-Fetch-Site nor Origin is refused: every browser the console
// supports sends one of them on a form post.
func checkSameOrigin(r *http.Request) *Problem {
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "same-origin":
		return nil
	case site == "" && originIsHost(r.Header.Get("Origin"), r.Host):
		return nil
	}
	return problem(http.StatusForbidden, codeCrossOrigin,
		"the console's forms are posted from its own pages: this request does not come from this server's origin")
}

// originIsHost reports whether an Origin header names host (the request's
// Host header), port included. The scheme is not compared: behind a
// TLS-terminating proxy the server is reached over http.
func originIsHost(origin, host string) bool {
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" && u.Path != "/" {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// readConsoleForm reads a console POST's form, refusing any body but
// application/x-www-form-urlencoded (415; multipart would spool file
// parts to the temporary directory, and POST /console/login takes it
// unauthenticated) and one past [Server.consoleFormLimit] (413). The
// handlers then find the form parsed in r.PostForm and r.Form.
func (s *Server) readConsoleForm(w http.ResponseWriter, r *http.Request) *Problem {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		mt, err = "application/x-www-form-urlencoded", nil // a form without fields
	}
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return problem(http.StatusUnsupportedMediaType, codeUnsupportedForm,
			"the console's forms are sent as application/x-www-form-urlencoded")
	}
	limit := s.consoleFormLimit(r)
	if r.ContentLength > limit {
		p := problem(http.StatusRequestEntityTooLarge, codePayloadTooLarge, fmt.Sprintf("the form is over %d bytes", limit))
		p.SizeBytes, p.LimitBytes = r.ContentLength, limit
		return p
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			p := problem(http.StatusRequestEntityTooLarge, codePayloadTooLarge, fmt.Sprintf("the form is over %d bytes", limit))
			p.LimitBytes = limit
			return p
		}
		return problem(http.StatusBadRequest, codeInvalidRequest, "the form does not parse: "+err.Error())
	}
	return nil
}

// consoleFormLimit is the most a console form's body may hold: what the
// API takes for the same request. A signal's form carries a payload, as
// POST /v1/tasks/{id}/signals/{name} does (MaxPayloadBytes and 64 KiB);
// every other form (sign-in, cancel and its reason, retries, schedules)
// 64 KiB, as an action's JSON body.
func (s *Server) consoleFormLimit(r *http.Request) int64 {
	if consoleSignalPath.MatchString(r.URL.Path) {
		return int64(s.cfg.MaxPayloadBytes) + envelopeBytes
	}
	return envelopeBytes
}

// consoleSignalPath is the path of the console's signal form.
var consoleSignalPath = regexp.MustCompile(`^/console/tasks/[^/]+/signals/[^/]+$`)
