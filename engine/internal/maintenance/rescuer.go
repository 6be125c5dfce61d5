package maintenance

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
)

// RescuerConfig configures a [Rescuer].
type RescuerConfig struct {
	Store store.Store
	// Owner identifies this process in the leader lease. Required.
	Owner string
	// Interval between passes. Default 5s. A pass takes or renews the
	// leader lease (for three intervals), rescues, and does the leader's
	// work. Rescues between passes are timed to the leases' expiry, which
	// each pass and each rescue read again, so a lease taken after a pass
	// is seen by the next one: keep Interval no longer than the shortest
	// lease TTL of the workers, or a crash right after a claim may wait
	// up to Interval − TTL more.
	Interval time.Duration
	// Clock tells the time of the rescues it writes; give the store the
	// same one. Default [store.WallClock].
	Clock store.Clock
	// Retention is what the leader removes at each pass after its rescues
	// (finished tasks past their namespace's retention). Its zero value
	// removes only in namespaces that set their own retention.
	Retention RetentionConfig
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Stored is Store as the database holds payloads (the store under
	// the encryption decorator, engine.SealedStore), which archives copy
	// as they are. Default Store.
	Stored store.Store
}

// Rescuer rescues the tasks whose lease expired (see [RescueExpired]) and,
// while it holds the "rescuer" leader lease, does the singleton work:
// start deadlines, cron schedules, retention.
//
// Every process may run one, and every one rescues: a rescue is a fenced
// append (see [RescueExpired]), safe whoever makes it, so a dead worker's
// tasks do not wait for leadership to pass on when the dead worker led.
// Each rescuer sleeps until the next lease expiry it knows of (read at
// every pass and after every rescue) rather than for a fixed interval.
// The leader rescues a lease as soon as it expires; the others only once
// it has been expired for their grace (rescueGrace, and a share of it
// drawn per rescuer), so they do not race a live leader for the same
// histories but take over within the grace when it is dead or busy.
type Rescuer struct {
	cfg RescuerConfig
	// grace is how long a lease must have been expired before this
	// rescuer, when not the leader, rescues it.
	grace  time.Duration
	svc    service.Base
	outage *service.Outage // the database out of reach, logged once per change of state
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
	if cfg.Stored == nil {
		cfg.Stored = cfg.Store
	}
	if err := cfg.Retention.validate(); err != nil {
		return nil, err
	}
	cfg.Retention = cfg.Retention.withDefaults()
	if cfg.Retention.Budget <= 0 {
		cfg.Retention.Budget = cfg.Interval / 10
	}
	grace := rescueGrace + rand.N(rescueGrace/2)
	return &Rescuer{cfg: cfg, grace: grace, outage: service.NewOutage(cfg.Logger, "rescuer")}, nil
}

// rescueGrace is the least time a lease must have been expired before a
// rescuer that does not lead rescues it; each rescuer adds a random share
// of up to half of it, so the others do not all wake at once. Short enough
// that a dead worker's tasks run again within a second of their lease's
// expiry whoever led; long enough for a live leader, which rescues at the
// expiry, to get there first.
const rescueGrace = 500 * time.Millisecond

// rescueBatch is how many expired leases one rescue lists at a time.
const rescueBatch = 100

// leaseWaitSlack is added to the wait for a lease's expiry: the store
// lists leases expired strictly before its now, so a wake exactly at the
// expiry would find nothing and wait again.
const leaseWaitSlack = time.Millisecond

const rescuerLeaderName = "rescuer"

// Start runs the rescuer until Stop or until ctx is done.
func (r *Rescuer) Start(ctx context.Context) error {
	return r.svc.Start(ctx, func(ctx context.Context) {
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
// first. Meanwhile it rescues each lease at its expiry (the leader) or
// its grace after (the others), and the leader fires each cron schedule
// at its tick rather than at the next pass, so a schedule fires within
// milliseconds of its tick (one created or resumed since the last pass is
// seen at the next one).
func (r *Rescuer) waitForPass(ctx context.Context, ticker *time.Ticker, leader bool) bool {
	schedule, lease := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	schedule.Stop()
	lease.Stop()
	defer schedule.Stop()
	defer lease.Stop()
	for {
		var scheduleDue, leaseDue <-chan time.Time
		if leader && !r.firingFailed {
			if at, ok := r.nextScheduleTick(ctx); ok {
				schedule.Reset(max(time.Until(at), minScheduleWait))
				scheduleDue = schedule.C
			}
		}
		if in, ok := r.nextLeaseExpiry(ctx, leader); ok {
			lease.Reset(in + leaseWaitSlack)
			leaseDue = lease.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
			return true
		case <-scheduleDue:
			r.fireSchedules(ctx)
		case <-leaseDue:
			r.rescue(ctx, leader)
		}
		schedule.Stop()
		lease.Stop()
	}
}

// leaseParams selects the leases this rescuer rescues: every expired one
// when it leads, else those expired for its grace.
func (r *Rescuer) leaseParams(leader bool) *store.LeaseExpiryParams {
	p := &store.LeaseExpiryParams{Max: rescueBatch}
	if !leader {
		p.ExpiredFor = r.grace
	}
	return p
}

// nextLeaseExpiry returns how long until the next lease this rescuer
// would rescue expires (see leaseParams), if one is held.
func (r *Rescuer) nextLeaseExpiry(ctx context.Context, leader bool) (time.Duration, bool) {
	in, ok, err := r.cfg.Store.TaskLeaseNextExpiry(ctx, r.leaseParams(leader))
	if err != nil {
		if ctx.Err() == nil && !service.Unavailable(err) {
			r.cfg.Logger.Warn("rescuer: read the next lease expiry", service.ErrAttr(err))
		}
		return 0, false
	}
	return in, ok
}

// nextScheduleTick returns when the next active schedule is due, if one is.
func (r *Rescuer) nextScheduleTick(ctx context.Context) (time.Time, bool) {
	at, ok, err := r.cfg.Store.ScheduleNextDue(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.Logger.Warn("rescuer: read the next schedule tick", service.ErrAttr(err))
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
		r.outage.OK()
	case ctx.Err() != nil:
		return false
	case service.Unavailable(err):
		r.outage.Failed(err)
		return false
	default:
		// Not the leader this pass; the rescue needs no leadership.
		r.cfg.Logger.Warn("rescuer: leader election", service.ErrAttr(err))
	}
	if leader != wasLeader {
		r.cfg.Logger.Debug("rescuer: leadership changed", "leader", leader, "owner", r.cfg.Owner)
	}
	r.rescue(ctx, leader)
	if !leader {
		return false
	}
	r.expireStartDeadlines(ctx)
	r.fireSchedules(ctx)
	r.removeFinished(ctx)
	return true
}

// rescue rescues, in batches, the expired leases leaseParams selects. A
// batch that rescued none of a full list (histories this process cannot
// read, or another rescuer quicker at each) ends it, so it does not spin
// on them; the next pass lists them again.
func (r *Rescuer) rescue(ctx context.Context, leader bool) {
	p := r.leaseParams(leader)
	for {
		n, listed, err := rescueExpired(ctx, r.cfg.Store, r.cfg.Clock, p)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: rescue expired leases", service.ErrAttr(err))
			}
			return
		}
		if n > 0 {
			r.cfg.Logger.Info("rescuer: rescued tasks with expired leases", "count", n, "leader", leader)
		}
		if listed < p.Max || n == 0 {
			return
		}
	}
}

// removeFinished runs retention (see [RetentionConfig]) within its
// budget.
func (r *Rescuer) removeFinished(ctx context.Context) {
	res, err := removeFinished(ctx, r.cfg.Store, r.cfg.Stored, r.cfg.Clock, r.cfg.Retention, r.cfg.Retention.Budget, &r.retentionNext)
	if res.Tasks > 0 {
		r.cfg.Logger.Info("rescuer: removed finished tasks past their retention", "tasks", res.Tasks, "events", res.Events)
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("rescuer: remove finished tasks", service.ErrAttr(err))
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
				r.cfg.Logger.Warn("rescuer: fire cron schedules; trying again at the next pass", "next_pass_in", r.cfg.Interval, service.ErrAttr(err))
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
			attrs = append(attrs, service.ErrAttr(f.StartErr))
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
				r.cfg.Logger.Warn("rescuer: expire tasks past their start deadline", service.ErrAttr(err))
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
func (r *Rescuer) Stop() { r.svc.Stop() }
