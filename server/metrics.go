package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the Prometheus metrics of Config.Gatherer at any
// path, for a listener of their own (Config.MetricsApart; cairn server
// --metrics-addr). It requires Config.MetricsToken when one is set;
// otherwise it answers whoever reaches it, within the loopback rule when
// there are no API tokens. Nil Gatherer: it answers 404.
func (s *Server) MetricsHandler() http.Handler {
	return s.recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", web.APICSP)
		if s.cfg.Gatherer == nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusNotFound, web.CodeNotFound, "no metrics are configured"))
			return
		}
		if s.cfg.MetricsToken == "" {
			if p := s.checkHost(r); p != nil {
				s.writeProblem(w, r, p)
				return
			}
		}
		s.metrics(false).ServeHTTP(w, r)
	}))
}

// metrics serves the exposition after checking access: the metrics token
// when configured; else, on the main handler (onAPI) with API tokens, an
// API token that may read every namespace.
func (s *Server) metrics(onAPI bool) http.Handler {
	expo := promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.cfg.MetricsToken != "":
			scheme, raw, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			got, want := sha256.Sum256([]byte(strings.TrimSpace(raw))), sha256.Sum256([]byte(s.cfg.MetricsToken))
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				s.writeProblem(w, r, web.NewProblem(http.StatusUnauthorized, web.CodeUnauthorized, "send the metrics token as Authorization: Bearer <token>"))
				return
			}
		case onAPI && len(s.tokens) > 0:
			who, p := web.Authenticate(s.tokens, r)
			if p != nil {
				s.writeProblem(w, r, p)
				return
			}
			if !who.Can(RoleRead) || !who.InNamespace(AllNamespaces) {
				s.writeProblem(w, r, web.NewProblem(http.StatusForbidden, web.CodeForbidden,
					`the metrics cover every namespace: use a token that may read in "*", or the metrics token`))
				return
			}
		}
		expo.ServeHTTP(w, r)
	})
}
