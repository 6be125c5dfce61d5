package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cairnflow/cairn/server/internal/web"
)

// Problem is an RFC 9457 problem detail, the body of every error response
// (Content-Type application/problem+json): the API's, and the console's
// where it answers other than with a page (a refused form, a missing
// static file). Code is stable: clients switch on it, never on Title or
// Detail. It is an alias: the console and the API share the one type.
type Problem = web.Problem

// writeProblem sends p, its instance the request's path as the client sent
// it (under Config.Prefix).
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	web.WriteProblem(w, r, s.cfg.Prefix, p)
}

// writeError answers err: as its problem if it has one, else as an internal
// error, logged with the request.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if web.ProblemFor(err) == nil && r.Context().Err() != nil {
		return // the client went away: nobody to answer
	}
	s.writeProblem(w, r, s.problemOf(r, err))
}

// problemOf is err's problem, logging what the answer leaves out: an
// error it does not recognize is answered as internal, without detail.
func (s *Server) problemOf(r *http.Request, err error) *Problem {
	if p := web.ProblemFor(err); p != nil {
		if p.Code == web.CodeUnavailable {
			s.logUnavailable(r, err)
		}
		return p
	}
	s.log.Error("request failed", "method", r.Method, "path", logPath(r), slog.String("error", err.Error()))
	return web.NewProblem(http.StatusInternalServerError, web.CodeInternal, "")
}

// logPath is r's path as logs may keep it: a callback's token, a bearer
// capability valid until its wait ends, is left out (a delivery that
// fails with a 5xx is logged while the link still works).
func logPath(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/v1/callbacks/") {
		return "/v1/callbacks/[redacted]"
	}
	return r.URL.Path
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
