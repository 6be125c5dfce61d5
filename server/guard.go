package server

import (
	"mime"
	"net/http"
	"strings"

	"github.com/cairnflow/cairn/server/internal/web"
)

// The web defences every request passes before its handler (see
// docs/guarantees.md ("Security") for what each one stops; the shared
// ones are in internal/web's guard.go):
//
//   - without API tokens, only requests whose Host is a loopback name or
//     address, or one of Config.AllowedHosts, are answered: a page that
//     rebinds its own DNS name to 127.0.0.1 sends its own name as Host;
//   - a write to /v1 must say Content-Type: application/json, which no
//     form and no cross-origin fetch without a CORS preflight can send,
//     and the server answers no preflight; but a callback link's page
//     posts its form to the link (its token is the capability);
//   - a write to /v1 that a browser marks as cross-origin
//     (Sec-Fetch-Site, else Origin) is refused;
//   - a console POST must come from one of the console's own pages:
//     Sec-Fetch-Site: same-origin, or, from a browser too old to send
//     that, an Origin whose host is the request's Host; and its body is
//     an application/x-www-form-urlencoded form within the API's limit
//     for the same request, read before its handler (never multipart:
//     nothing is spooled to disk, before or after signing in): the
//     console checks these itself (server/console's guard.go);
//   - every response says nosniff, same-origin referrers, and a content
//     security policy that, among the rest, forbids framing.

// guard wraps the whole handler with the defences above. The console's
// paths get the console's policy here too, so a request refused before it
// reaches the console (a host not allowed) carries it; the console checks
// its own forms ([console.Console] applies the console's defences itself).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		csp := web.APICSP
		if strings.HasPrefix(r.URL.Path, "/console/") || r.URL.Path == "/" {
			csp = web.ConsoleCSP
		}
		web.SetHeaders(w.Header(), csp)
		if p := s.checkHost(r); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && strings.HasPrefix(r.URL.Path, "/v1/") {
			p := checkJSONBody(r)
			if p != nil && callbackFormPost(r) {
				p = nil
			}
			if p == nil {
				p = checkNotCrossOrigin(r)
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
func (s *Server) checkHost(r *http.Request) *Problem {
	return web.CheckHost(r, len(s.tokens) > 0, s.cfg.AllowedHosts)
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
	return web.NewProblem(http.StatusUnsupportedMediaType, web.CodeUnsupportedMedia,
		"send Content-Type: application/json (with a body of {} when there is nothing to say)")
}

// callbackFormPost reports whether r is a callback link's page posting
// its form (urlencoded): the link's token, not the body's type, is what
// keeps other pages from deciding, as they cannot know it; the page's
// own post is same-origin, and checkNotCrossOrigin still applies.
func callbackFormPost(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, "/v1/callbacks/") {
		return false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/x-www-form-urlencoded"
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
		if origin := r.Header.Get("Origin"); origin == "" || web.OriginIsHost(origin, r.Host) {
			return nil
		}
	}
	return web.NewProblem(http.StatusForbidden, web.CodeCrossOrigin, "a web page of another origin may not write through the API")
}
