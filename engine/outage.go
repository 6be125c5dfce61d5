package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
)

// outage logs a component's trouble reaching the database once per change
// of state: a warning at the first failure, an info line when it works
// again (with how long it was down and how many tries failed), and the
// tries between at debug level. A database that is down for a minute
// leaves two lines per component, not one per retry.
type outage struct {
	logger *slog.Logger
	what   string // the component: "processor: claim", "notifier", ...

	mu       sync.Mutex
	since    time.Time // zero while the database answers
	failures int
}

func newOutage(logger *slog.Logger, what string) *outage {
	return &outage{logger: logger, what: what}
}

// failed records a failed try.
func (o *outage) failed(err error) {
	o.mu.Lock()
	first := o.since.IsZero()
	if first {
		o.since = time.Now()
	}
	o.failures++
	o.mu.Unlock()
	if first {
		o.logger.Warn(o.what+": database unavailable; retrying with backoff", errAttr(err))
		return
	}
	o.logger.Debug(o.what+": database still unavailable", errAttr(err))
}

// down reports whether an outage is being reported: a try failed and none
// has worked since.
func (o *outage) down() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero()
}

// ok records a try that worked.
func (o *outage) ok() {
	o.mu.Lock()
	since, failures := o.since, o.failures
	o.since, o.failures = time.Time{}, 0
	o.mu.Unlock()
	if !since.IsZero() {
		o.logger.Info(o.what+": database available again", "down_for", time.Since(since).Round(time.Millisecond), "failed_tries", failures)
	}
}

// Retry delays double from minBackoff up to a ceiling: maxBackoff for
// background work, workBackoff for the claim loop and the appender, whose
// delay after the database is back is a delay of the work itself.
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 5 * time.Second
	workBackoff = 2 * time.Second
)

func nextBackoff(d, ceiling time.Duration) time.Duration {
	if d < minBackoff {
		return minBackoff
	}
	return min(2*d, ceiling)
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isConnectionError reports whether err is the database being out of
// reach (the driver marked it [store.ErrUnavailable]) rather than a refusal
// of the statement itself: worth trying again after a pause.
func isConnectionError(err error) bool { return errors.Is(err, store.ErrUnavailable) }
