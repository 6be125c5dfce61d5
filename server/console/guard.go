package console

import (
	"fmt"
	"mime"
	"net/http"
	"regexp"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/server/internal/web"
)

// The console's defences, applied before any page (see docs/guarantees.md
// ("Security") for what each one stops); mounted by the server they run
// after its own guard, which applies the same headers and host rule:
//
//   - every response says nosniff, same-origin referrers, and the
//     console's content security policy, which among the rest forbids
//     framing;
//   - without API tokens, only requests whose Host is a loopback name or
//     address, or one of Config.AllowedHosts, are answered;
//   - a POST must come from one of the console's own pages:
//     Sec-Fetch-Site: same-origin, or, from a browser too old to send
//     that, an Origin whose host is the request's Host; and its body is
//     an application/x-www-form-urlencoded form within the API's limit
//     for the same request, read here (never multipart: nothing is
//     spooled to disk, before or after signing in).

// guard wraps the console's pages with the defences above.
func (s *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		web.SetHeaders(w.Header(), web.ConsoleCSP)
		if p := web.CheckHost(r, len(s.tokens) > 0, s.cfg.AllowedHosts); p != nil {
			s.writeProblem(w, r, p)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			p := checkSameOrigin(r)
			if p == nil {
				p = s.readConsoleForm(w, r)
			}
			if p != nil {
				s.writeProblem(w, r, p)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkSameOrigin lets a console POST through only when the browser says
// it comes from one of the server's own pages. A request that says
// neither Sec-Fetch-Site nor Origin is refused: every browser the console
// supports sends one of them on a form post.
func checkSameOrigin(r *http.Request) *web.Problem {
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "same-origin":
		return nil
	case site == "" && web.OriginIsHost(r.Header.Get("Origin"), r.Host):
		return nil
	}
	return web.NewProblem(http.StatusForbidden, web.CodeCrossOrigin,
		"the console's forms are posted from its own pages: this request does not come from this server's origin")
}

// readConsoleForm reads a console POST's form, refusing any body but
// application/x-www-form-urlencoded (415; multipart would spool file
// parts to the temporary directory, and POST /console/login takes it
// unauthenticated) and one past [Console.consoleFormLimit] (413). The
// handlers then find the form parsed in r.PostForm and r.Form.
func (s *Console) readConsoleForm(w http.ResponseWriter, r *http.Request) *web.Problem {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		mt, err = "application/x-www-form-urlencoded", nil // a form without fields
	}
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return web.NewProblem(http.StatusUnsupportedMediaType, web.CodeUnsupportedForm,
			"the console's forms are sent as application/x-www-form-urlencoded")
	}
	limit := s.consoleFormLimit(r)
	if r.ContentLength > limit {
		p := web.NewProblem(http.StatusRequestEntityTooLarge, web.CodePayloadTooLarge, fmt.Sprintf("the form is over %d bytes", limit))
		p.SizeBytes, p.LimitBytes = r.ContentLength, limit
		return p
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			p := web.NewProblem(http.StatusRequestEntityTooLarge, web.CodePayloadTooLarge, fmt.Sprintf("the form is over %d bytes", limit))
			p.LimitBytes = limit
			return p
		}
		return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "the form does not parse: "+err.Error())
	}
	return nil
}

// consoleFormLimit is the most a console form's body may hold: what the
// API takes for the same request. A signal's form carries a payload, as
// POST /v1/tasks/{id}/signals/{name} does (MaxPayloadBytes and 64 KiB);
// every other form (sign-in, cancel and its reason, retries, schedules)
// 64 KiB, as an action's JSON body.
func (s *Console) consoleFormLimit(r *http.Request) int64 {
	if consoleSignalPath.MatchString(r.URL.Path) {
		return int64(s.cfg.MaxPayloadBytes) + web.EnvelopeBytes
	}
	return web.EnvelopeBytes
}

// consoleSignalPath is the path of the console's signal form.
var consoleSignalPath = regexp.MustCompile(`^/console/tasks/[^/]+/signals/[^/]+$`)
