package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
)

// RescuerConfig configures a [Rescuer].
type RescuerConfig struct {
	Store store.Store
	// Owner identifies this process in the leader lease. Required.
	Owner string
	// Interval between passes. Default 5s.
	Interval time.Duration
	// Clock tells the time of the rescues it writes; give the store the
	// same one. Default [store.WallClock].
	Clock Clock
	// Retention is what the leader removes at each pass after its rescues
	// (finished tasks past their namespace's retention). Its zero value
	// removes only in namespaces that set their own retention.
	Retention RetentionConfig
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Rescuer is the leader-only service that runs [store.Store.RescueExpired]
// periodically. Every process may run one; only the holder of the "rescuer"
// leader lease does the work.
type Rescuer struct {
	cfg    RescuerConfig
	svc    service
	outage *outage // the database out of reach, logged once per change of state
	// firingFailed: the last firing of schedules failed, so the leader
	// waits for its next pass before firing again rather than retrying at
	// the (past) tick at once. Only the service's goroutine uses it.
	firingFailed bool
	// retentionNext is the namespace the next retention pass begins with
	// (see removeFinished). Only the service's goroutine uses it.
	retentionNext string
}

// NewRescuer returns a rescuer; it does nothing until started.
func NewRescuer(cfg RescuerConfig) (*Rescuer, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, errors.New("engine: RescuerConfig needs Store and Owner")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = store.WallClock
	}
	if err := cfg.Retention.validate(); err != nil {
		return nil, err
	}
	cfg.Retention = cfg.Retention.withDefaults()
	if cfg.Retention.Budget <= 0 {
		cfg.Retention.Budget = cfg.Interval / 10
	}
	return &Rescuer{cfg: cfg, outage: newOutage(cfg.Logger, "rescuer")}, nil
}

const rescuerLeaderName = "rescuer"

// Start runs the rescuer until Stop or until ctx is done.
func (r *Rescuer) Start(ctx context.Context) error {
	return r.svc.start(ctx, func(ctx context.Context) {
		ticker := time.NewTicker(r.cfg.Interval)
		defer ticker.Stop()
		leader := false
		for {
			leader = r.pass(ctx, leader)
			if !r.waitForPass(ctx, ticker, leader) {
				// Resign whatever the last pass saw: an election cut off by
				// the stop may still have committed.
				resignCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = r.cfg.Store.LeaderResign(resignCtx, rescuerLeaderName, r.cfg.Owner)
				cancel()
				return
			}
		}
	})
}

// minScheduleWait keeps the wait for a schedule's tick from spinning when
// the database's clock is a little behind this process's.
const minScheduleWait = 10 * time.Millisecond

// waitForPass waits for the next pass, and reports false when ctx ends
// first. Meanwhile the leader fires each cron schedule at its tick rather
// than at the next pass, so a schedule fires within milliseconds of its tick
// (one created or resumed since the last pass is seen at the next one).
func (r *Rescuer) waitForPass(ctx context.Context, ticker *time.Ticker, leader bool) bool {
	for {
		var wake <-chan time.Time
		if leader && !r.firingFailed {
			if at, ok := r.nextScheduleTick(ctx); ok {
				timer := time.NewTimer(max(time.Until(at), minScheduleWait))
				defer timer.Stop() // at most one pending: a fired timer needs no stop
				wake = timer.C
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
			return true
		case <-wake:
			r.fireSchedules(ctx)
		}
	}
}

// nextScheduleTick returns when the next active schedule is due, if one is.
func (r *Rescuer) nextScheduleTick(ctx context.Context) (time.Time, bool) {
	at, ok, err := r.cfg.Store.ScheduleNextDue(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.Logger.Warn("rescuer: read the next schedule tick", errAttr(err))
		}
		return time.Time{}, false
	}
	return at, ok
}

func (r *Rescuer) pass(ctx context.Context, wasLeader bool) bool {
	// The lease outlives a few missed passes, so one slow pass does not
	// hand leadership over.
	electCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(3*r.cfg.Interval, 5*time.Second))
	leader, err := r.cfg.Store.LeaderAttempt(electCtx, rescuerLeaderName, r.cfg.Owner, 3*r.cfg.Interval)
	cancel()
	switch {
	case err == nil:
		r.outage.ok()
	case ctx.Err() != nil:
		return false
	case isConnectionError(err):
		r.outage.failed(err)
		return false
	default:
		r.cfg.Logger.Warn("rescuer: leader election", errAttr(err))
		return false
	}
	if leader != wasLeader {
		r.cfg.Logger.Debug("rescuer: leadership changed", "leader", leader, "owner", r.cfg.Owner)
	}
	if !leader {
		return false
	}
	r.expireStartDeadlines(ctx)
	r.fireSchedules(ctx)
	for {
		n, err := rescueExpired(ctx, r.cfg.Store, r.cfg.Clock, 100)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: rescue expired leases", errAttr(err))
			}
			return true
		}
		if n > 0 {
			r.cfg.Logger.Info("rescuer: rescued tasks with expired leases", "count", n)
		}
		if n < 100 {
			break
		}
	}
	r.removeFinished(ctx)
	return true
}

// removeFinished runs retention (see [RetentionConfig]) within its
// budget.
func (r *Rescuer) removeFinished(ctx context.Context) {
	res, err := removeFinished(ctx, r.cfg.Store, r.cfg.Clock, r.cfg.Retention, r.cfg.Retention.Budget, &r.retentionNext)
	if res.Tasks > 0 {
		r.cfg.Logger.Info("rescuer: removed finished tasks past their retention", "tasks", res.Tasks, "events", res.Events)
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("rescuer: remove finished tasks", errAttr(err))
	}
}

// scheduleBatch is how many due schedules one ScheduleFireDue call fires.
const scheduleBatch = 100

// fireSchedules starts the tasks of due cron schedules, in batches. A
// schedule whose queue is full is skipped by the store and tried again
// later; its change between firing and skipping is logged once. A failure
// sets firingFailed, so the next try is at the next pass.
func (r *Rescuer) fireSchedules(ctx context.Context) {
	for {
		firings, err := r.cfg.Store.ScheduleFireDue(ctx, scheduleBatch)
		for _, f := range firings {
			r.logFiring(f)
		}
		r.firingFailed = err != nil
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: fire cron schedules; trying again at the next pass", "next_pass_in", r.cfg.Interval, errAttr(err))
			}
			return
		}
		if len(firings) < scheduleBatch {
			return
		}
	}
}

// logFiring logs a schedule's change of state: a warning when it starts
// skipping ticks, and an info line when it fires again. A skip after a skip
// logs nothing (the metric cairn_schedule_skipped_total counts each).
func (r *Rescuer) logFiring(f store.ScheduleFiring) {
	switch {
	case f.Skipped() && !f.WasSkipped:
		attrs := []any{"namespace", f.Namespace, "schedule", f.Name, "tick", f.Tick, "reason", f.SkipReason, "retry_at", f.RetryAt}
		if f.StartErr != nil {
			attrs = append(attrs, errAttr(f.StartErr))
		}
		r.cfg.Logger.Warn("rescuer: schedule skipped its tick; trying again later", attrs...)
	case !f.Skipped() && f.WasSkipped:
		r.cfg.Logger.Info("rescuer: schedule fired again after skipped ticks",
			"namespace", f.Namespace, "schedule", f.Name, "tick", f.Tick)
	}
}

// expireStartDeadlines ends, in batches, the tasks not started by their
// start deadline.
func (r *Rescuer) expireStartDeadlines(ctx context.Context) {
	for {
		n, err := ExpireStartDeadlines(ctx, r.cfg.Store, 100)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: expire tasks past their start deadline", errAttr(err))
			}
			return
		}
		if n > 0 {
			r.cfg.Logger.Info("rescuer: expired tasks not started by their start deadline", "count", n)
		}
		if n < 100 {
			return
		}
	}
}

// Stop stops the rescuer and waits for it. It is idempotent.
func (r *Rescuer) Stop() { r.svc.stop() }
