package maintenance

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// minScheduleWait keeps the wait for a schedule's tick from spinning when
// the database's clock is a little behind this process's.
const minScheduleWait = 10 * time.Millisecond

// scheduleBatch is how many due schedules one FireSchedules call fires.
const scheduleBatch = 100

// cron is the leader's service that fires cron schedules: at each pass,
// and between passes at each schedule's tick, so a schedule fires within
// milliseconds of its tick (one created or resumed since the last pass is
// seen at the next one).
type cron struct {
	cfg Config
	svc service.Base
	// firingFailed: the last firing failed, so the next waits for the
	// next pass rather than retrying at the (past) tick at once. Only the
	// service's goroutine uses it.
	firingFailed bool
}

// Start fires schedules until Stop or until ctx is done.
func (c *cron) Start(ctx context.Context) error { return c.svc.Start(ctx, c.run) }

// Stop stops firing and waits.
func (c *cron) Stop() { c.svc.Stop() }

func (c *cron) run(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	tick := time.NewTimer(time.Hour)
	tick.Stop()
	defer tick.Stop()
	c.fireSchedules(ctx)
	for {
		var tickDue <-chan time.Time
		if !c.firingFailed {
			if at, ok := c.nextScheduleTick(ctx); ok {
				tick.Reset(max(time.Until(at), minScheduleWait))
				tickDue = tick.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-tickDue:
		}
		tick.Stop()
		c.fireSchedules(ctx)
	}
}

// nextScheduleTick returns when the next active schedule is due, if one is.
func (c *cron) nextScheduleTick(ctx context.Context) (time.Time, bool) {
	at, ok, err := c.cfg.Store.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{})
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("rescuer: read the next schedule tick", service.ErrAttr(err))
		}
		return time.Time{}, false
	}
	return at, ok
}

// fireSchedules starts the tasks of due cron schedules, in batches
// ([FireSchedules]). A schedule whose queue is full is skipped and tried
// again later; its change between firing and skipping is logged once. A failure
// sets firingFailed, so the next try is at the next pass.
func (c *cron) fireSchedules(ctx context.Context) {
	for {
		firings, err := FireSchedules(ctx, c.cfg.Store, c.cfg.Clock, scheduleBatch)
		for _, f := range firings {
			c.logFiring(f)
		}
		c.firingFailed = err != nil
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("rescuer: fire cron schedules; trying again at the next pass", "next_pass_in", c.cfg.Interval, service.ErrAttr(err))
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
func (c *cron) logFiring(f store.ScheduleFiring) {
	switch {
	case f.Skipped() && !f.WasSkipped:
		attrs := []any{"namespace", f.Namespace, "schedule", f.Name, "tick", f.Tick, "reason", f.SkipReason, "retry_at", f.RetryAt}
		if f.StartErr != nil {
			attrs = append(attrs, service.ErrAttr(f.StartErr))
		}
		c.cfg.Logger.Warn("rescuer: schedule skipped its tick; trying again later", attrs...)
	case !f.Skipped() && f.WasSkipped:
		c.cfg.Logger.Info("rescuer: schedule fired again after skipped ticks",
			"namespace", f.Namespace, "schedule", f.Name, "tick", f.Tick)
	}
}

// FireSchedules fires the due schedules of st, up to max, in one
// transaction, and returns what it did with each (the cron service's
// work, at each pass and at each schedule's tick).
//
// It lists the due schedules locked (store.Executor.ScheduleListDue:
// another firer skips them until the transaction ends), and for each
// starts a task for its latest tick not after now (the clock's; nil is
// the wall clock): the task's idempotency key "schedule:<name>:<tick>"
// makes one task per tick, whoever fires it and however often. The
// schedule then moves to its next tick after now (ScheduleMarkFired).
// Ticks missed meanwhile are not made up ([store.ScheduleDueTicks]).
//
// A tick whose start is refused is skipped, not failed: a full queue
// (ScheduleSkipQueueFull) or a start failing for a reason of its own
// (ScheduleSkipStartFailed, its StartErr set) records the skip
// (ScheduleMarkSkipped, which the store's observer counts once it
// commits), and the schedule is tried again at its retry time: the
// queue's hint, or [store.ScheduleStartRetry], unless its next tick
// comes first. Each start runs in a savepoint of its own, so a refused
// one writes nothing and leaves the transaction usable (PostgreSQL aborts
// a transaction whose statement failed), and each schedule's writes in
// another, so one schedule's failure does not hold the others back: its
// error is joined to the others' and the rest fire and commit. An error
// that is not the schedule's own (ctx ended, the store out of reach)
// rolls the whole firing back: nothing fired, and the error.
func FireSchedules(ctx context.Context, st store.Executor, clock store.Clock, max int) ([]store.ScheduleFiring, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "fire schedules")
	}
	defer func() { _ = tx.Rollback(ctx) }()
	due, err := tx.ScheduleListDue(ctx, &store.ScheduleListDueParams{Max: max})
	if err != nil {
		return nil, err
	}
	now := plan.Now(clock)
	var out []store.ScheduleFiring
	var errs []error
	for i := range due {
		f, err := fireSchedule(ctx, tx, &due[i], now)
		switch {
		case err != nil && !failedFor(ctx, err):
			return nil, errors.Join(append(errs, err)...)
		case err != nil:
			// One schedule's failure does not hold the others back.
			errs = append(errs, err)
		default:
			out = append(out, f)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, errors.Join(append(errs, errors.Wrap(err, "fire schedules"))...)
	}
	return out, errors.Join(errs...)
}

// failedFor reports whether a schedule's start (or firing) failed for a
// reason of its own, not because the store is out of reach or the caller
// gave up (which the cron service retries at its next pass).
func failedFor(ctx context.Context, err error) bool {
	if errors.Is(err, store.ErrNamespaceMoved) {
		// The schedule's namespace moved to another cell: its own, or
		// the whole firing would roll back, every namespace's.
		return ctx.Err() == nil
	}
	return ctx.Err() == nil && !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrRetryable)
}

// fireSchedule fires one due schedule in a savepoint of tx: its tick's
// task started (or the tick skipped) and the schedule moved on. On an
// error the savepoint is rolled back: nothing of the schedule is written.
func fireSchedule(ctx context.Context, tx store.Tx, sc *store.Schedule, now time.Time) (store.ScheduleFiring, error) {
	f := store.ScheduleFiring{Namespace: sc.Namespace, Name: sc.Name, WasSkipped: sc.RetryAt != nil}
	ticks, err := store.ScheduleDueTicks(sc, now)
	if err != nil {
		return f, err
	}
	f.Tick = ticks.Tick
	sp, err := tx.Begin(ctx)
	if err != nil {
		return f, errors.Wrapf(err, "fire schedule %s", sc.Name)
	}
	defer func() { _ = sp.Rollback(ctx) }()
	res, err := startInSavepoint(ctx, sp, store.ScheduleTaskAt(sc, f.Tick))
	var full *store.QueueFullError
	switch {
	case errors.As(err, &full):
		f.SkipReason, f.RetryAt = store.ScheduleSkipQueueFull, ticks.RetryAt(full.RetryAfter)
	case err != nil && failedFor(ctx, err):
		// The savepoint undid the start; the skip is recorded so the
		// broken schedule waits instead of holding the due list.
		f.SkipReason, f.StartErr = store.ScheduleSkipStartFailed, errors.Wrapf(err, "start the task of schedule %s", sc.Name)
		f.RetryAt = ticks.RetryAt(store.ScheduleStartRetry)
	case err != nil:
		return f, errors.Wrapf(err, "fire schedule %s", sc.Name)
	}
	if f.Skipped() {
		err = sp.ScheduleMarkSkipped(ctx, &store.ScheduleMarkSkippedParams{Namespace: sc.Namespace, Name: sc.Name,
			Tick: f.Tick, RetryAt: f.RetryAt, SkippedAt: now, Reason: f.SkipReason})
	} else {
		f.Started = !res.Existing
		err = sp.ScheduleMarkFired(ctx, &store.ScheduleMarkFiredParams{Namespace: sc.Namespace, Name: sc.Name,
			NextRunAt: ticks.Next, LastTick: f.Tick})
	}
	if err != nil {
		return f, err
	}
	return f, errors.Wrapf(sp.Commit(ctx), "fire schedule %s", sc.Name)
}

// startInSavepoint starts p in a savepoint of ex, rolled back when the
// start fails, so a refused start writes nothing and ex stays usable.
func startInSavepoint(ctx context.Context, ex store.Executor, p *store.TaskStartParams) (store.TaskStartResult, error) {
	sp, err := ex.Begin(ctx)
	if err != nil {
		return store.TaskStartResult{}, err
	}
	res, err := sp.TaskStart(ctx, p)
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return res, errors.Join(err, rbErr)
		}
		return res, err
	}
	return res, sp.Commit(ctx)
}
