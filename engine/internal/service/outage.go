package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
)

// Outage logs a component's trouble reaching the database once per change
// of state: a warning at the first failure, an info line when it works
// again (with how long it was down and how many tries failed), and the
// tries between at debug level. A database that is down for a minute
// leaves two lines per component, not one per retry.
type Outage struct {
	logger *slog.Logger
	what   string // the component: "processor: claim", "notifier", ...

	mu       sync.Mutex
	since    time.Time // zero while the database answers
	failures int
}

// NewOutage returns the outage log of the component what ("processor:
// claim", "notifier", ...); its lines begin with what.
func NewOutage(logger *slog.Logger, what string) *Outage {
	return &Outage{logger: logger, what: what}
}

// Failed records a failed try.
func (o *Outage) Failed(err error) {
	o.mu.Lock()
	first := o.since.IsZero()
	if first {
		o.since = time.Now()
	}
	o.failures++
	o.mu.Unlock()
	if first {
		o.logger.Warn(o.what+": database unavailable; retrying with backoff", ErrAttr(err))
		return
	}
	o.logger.Debug(o.what+": database still unavailable", ErrAttr(err))
}

// Down reports whether an outage is being reported: a try failed and none
// has worked since.
func (o *Outage) Down() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero()
}

// OK records a try that worked.
func (o *Outage) OK() {
	o.mu.Lock()
	since, failures := o.since, o.failures
	o.since, o.failures = time.Time{}, 0
	o.mu.Unlock()
	if !since.IsZero() {
		o.logger.Info(o.what+": database available again", "down_for", time.Since(since).Round(time.Millisecond), "failed_tries", failures)
	}
}

// Retry delays double from MinBackoff up to a ceiling: MaxBackoff for
// background work, WorkBackoff for the claim loop and the appender, whose
// delay after the database is back is a delay of the work itself.
const (
	MinBackoff  = 100 * time.Millisecond
	MaxBackoff  = 5 * time.Second
	WorkBackoff = 2 * time.Second
)

// NextBackoff is the delay after d: MinBackoff at first, then doubling up
// to ceiling.
func NextBackoff(d, ceiling time.Duration) time.Duration {
	if d < MinBackoff {
		return MinBackoff
	}
	return min(2*d, ceiling)
}

// Sleep waits d or until ctx is done; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Unavailable reports whether err is the database being out of
// reach (the driver marked it [store.ErrUnavailable]) rather than a refusal
// of the statement itself: worth trying again after a pause.
func Unavailable(err error) bool { return errors.Is(err, store.ErrUnavailable) }
