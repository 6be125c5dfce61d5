package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// unavailableLogEvery is how often a cell's "database unavailable"
// warning is logged while its requests keep failing: the first at once,
// then at most one an interval, counting those left out. A cell that is
// down fails every request of its namespaces; a warning each would bury
// the log.
const unavailableLogEvery = 10 * time.Second

// unavailableLog throttles the "database unavailable" warnings, by cell
// ("" without cells): the keys are the placement map's cells, so bounded.
type unavailableLog struct {
	every time.Duration
	mu    sync.Mutex
	cells map[string]*unavailableCell
}

type unavailableCell struct {
	next    time.Time // the next warning is due then
	omitted int       // warnings left out since the last one logged
}

// allow says whether a warning for cell may be logged at now, and how many
// were left out before it.
func (l *unavailableLog) allow(cell string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cells == nil {
		l.cells = map[string]*unavailableCell{}
	}
	c := l.cells[cell]
	if c == nil {
		c = &unavailableCell{}
		l.cells[cell] = c
	}
	if now.Before(c.next) {
		c.omitted++
		return false, 0
	}
	omitted := c.omitted
	c.next, c.omitted = now.Add(l.every), 0
	return true, omitted
}

// namespaceKey is the request context's key for the namespace api
// resolved.
type namespaceKey struct{}

func withNamespace(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, namespaceKey{}, ns)
}

// logUnavailable logs, throttled by cell, that r failed because its
// namespace's database did not answer; the answer hides the hosts, the
// log keeps them for the operator.
func (s *Server) logUnavailable(r *http.Request, err error) {
	ns, _ := r.Context().Value(namespaceKey{}).(string)
	cell := ""
	if s.cells != nil && ns != "" {
		cell, _, _ = s.cells.Of(ns)
	}
	ok, omitted := s.unavailable.allow(cell, time.Now())
	if !ok {
		return
	}
	attrs := []any{"method", r.Method, "path", logPath(r), slog.String("error", err.Error())}
	if s.cells != nil {
		attrs = append(attrs, "cell", cell, "namespace", ns)
	}
	if omitted > 0 {
		attrs = append(attrs, "omitted", omitted)
	}
	s.log.Warn("database unavailable", attrs...)
}
