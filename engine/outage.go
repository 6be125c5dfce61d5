package engine

import (
	"context"
	"github.com/cockroachdb/errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// IsConnectionError reports whether err is the database being out of
// reach (refused or dropped connections, a server shutting down or
// starting up) rather than a refusal of the statement itself: worth trying
// again after a pause.
func IsConnectionError(err error) bool { return isConnectionError(err) }

// isConnectionError reports whether err is the database being out of
// reach (refused or dropped connections, a server shutting down or
// starting up) rather than a refusal of the statement itself.
func isConnectionError(err error) bool {
	if err == nil {
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08": // connection exception
			return true
		case "57": // operator intervention: admin_shutdown, crash_shutdown, cannot_connect_now
			return pgErr.Code != "57014" // query_canceled is a statement's own timeout
		}
	}
	var closed interface{ SafeToRetry() bool }
	return errors.As(err, &closed) && closed.SafeToRetry()
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
