package maintenance

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// summarizeEvery is how many maintainer intervals pass between two
// summaries of the store's range indexes: a minute at the default 5 s,
// about when autovacuum's autosummarize (which migration 0026 turned
// off) would have summarized a filled range.
const summarizeEvery = 12

// summarizer is the leader's service that keeps the store's range indexes
// summarized ([store.Store.IndexSummarize]): a range filled since the
// last pass gets its summary, so the audit's time ranges skip it rather
// than read it whole. A role the store refuses it to (PostgreSQL: without
// EXECUTE on summarize_event_ranges) is told once in the log, and the
// service stops until the next term: a VACUUM of the table summarizes the
// ranges too.
type summarizer struct {
	cfg Config
	svc service.Base
}

// Start summarizes until Stop or until ctx is done.
func (s *summarizer) Start(ctx context.Context) error {
	return s.svc.Start(ctx, func(ctx context.Context) {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		every(ctx, summarizeEvery*s.cfg.Interval, func(ctx context.Context) {
			if !s.pass(ctx) {
				stop()
			}
		})
	})
}

// Stop stops summarizing and waits.
func (s *summarizer) Stop() { s.svc.Stop() }

// pass summarizes once and reports whether passes should go on.
func (s *summarizer) pass(ctx context.Context) bool {
	started := time.Now()
	n, err := s.cfg.Store.IndexSummarize(ctx)
	switch {
	case errors.Is(err, store.ErrUnsupported):
		s.cfg.Logger.Warn("maintenance: range indexes are left to VACUUM", "error", err)
		return false
	case err != nil && ctx.Err() == nil:
		s.cfg.Logger.Warn("maintenance: summarize range indexes", "error", err)
	case n > 0:
		s.cfg.Logger.Debug("maintenance: summarized range indexes", "ranges", n, "took", time.Since(started))
	}
	return true
}
