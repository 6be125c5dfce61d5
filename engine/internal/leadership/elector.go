// Package leadership elects one process at a time to do a store's
// singleton work: each [Elector] takes or renews a lease row of the
// store's (store.Store.LeaderAttempt) at every interval, for three
// intervals, and tells what each attempt found. Correctness never rests on
// it alone: the work done under it is fenced appends, so two leaders for
// a moment (a lease that ran out while its holder was slow) write nothing
// twice. River's internal/leadership is the model.
//
// It imports engine/store and engine/internal/service.
package leadership

import (
	"context"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// Attempt is what one try at the lease found.
type Attempt struct {
	// Leader: this process holds the lease, for three intervals from the
	// attempt.
	Leader bool
	// Answered: the database answered the attempt, whether or not it made
	// this process the leader; false while it is out of reach.
	Answered bool
}

// Config configures an [Elector].
type Config struct {
	Store store.Store // required
	// Name is the lease's, and begins the elector's log lines. Required.
	Name string
	// Owner identifies this process in the lease. Required.
	Owner string
	// Interval between attempts; the lease lasts three, so it outlives a
	// few missed ones. Required.
	Interval time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Elector tries for the lease at once and then at every interval, and
// sends what each try found on [Elector.Attempts], waiting for it to be
// taken. Stopped, it resigns the lease, so another process takes over at
// once rather than when the lease runs out.
type Elector struct {
	cfg      Config
	svc      service.Base
	outage   *service.Outage // the database out of reach, logged once per change of state
	attempts chan Attempt    // unbuffered: the next attempt waits until the last is taken
}

// New returns an elector; it does nothing until started.
func New(cfg Config) (*Elector, error) {
	if cfg.Store == nil || cfg.Name == "" || cfg.Owner == "" || cfg.Interval <= 0 {
		return nil, errors.New("leadership: Config needs Store, Name, Owner and Interval")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Elector{cfg: cfg, outage: service.NewOutage(cfg.Logger, cfg.Name), attempts: make(chan Attempt)}, nil
}

// Attempts receives what each attempt found, in order.
func (e *Elector) Attempts() <-chan Attempt { return e.attempts }

// Start tries for the lease until Stop or until ctx is done, then
// resigns it.
func (e *Elector) Start(ctx context.Context) error {
	return e.svc.Start(ctx, func(ctx context.Context) {
		ticker := time.NewTicker(e.cfg.Interval)
		defer ticker.Stop()
		// Resign whatever the last attempt found: one cut off by the stop
		// may still have committed.
		defer e.resign(ctx)
		wasLeader := false
		for {
			a, ok := e.attempt(ctx)
			if !ok {
				return
			}
			if a.Leader != wasLeader {
				e.cfg.Logger.Debug(e.cfg.Name+": leadership changed", "leader", a.Leader, "owner", e.cfg.Owner)
			}
			wasLeader = a.Leader
			select {
			case e.attempts <- a:
			case <-ctx.Done():
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	})
}

// Stop stops trying, resigns the lease, and waits. It is idempotent.
func (e *Elector) Stop() { e.svc.Stop() }

// attempt takes or renews the lease; ok is false when ctx ended first.
func (e *Elector) attempt(ctx context.Context) (a Attempt, ok bool) {
	// The lease outlives a few missed attempts, so one slow attempt does
	// not hand leadership over.
	electCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(3*e.cfg.Interval, 5*time.Second))
	leader, err := e.cfg.Store.LeaderAttempt(electCtx, &store.LeaderAttemptParams{
		Name: e.cfg.Name, Owner: e.cfg.Owner, TTL: 3 * e.cfg.Interval,
	})
	cancel()
	switch {
	case err == nil:
		e.outage.OK()
	case ctx.Err() != nil:
		return Attempt{}, false
	case service.Unavailable(err):
		e.outage.Failed(err)
		return Attempt{}, true
	default:
		// Not the leader this time; the database answered all the same.
		e.cfg.Logger.Warn(e.cfg.Name+": leader election", service.ErrAttr(err))
	}
	return Attempt{Leader: leader, Answered: true}, true
}

// resign gives the lease up, if this process holds it.
func (e *Elector) resign(ctx context.Context) {
	resignCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = e.cfg.Store.LeaderResign(resignCtx, &store.LeaderResignParams{Name: e.cfg.Name, Owner: e.cfg.Owner})
}
