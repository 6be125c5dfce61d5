package maintenance

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// minScheduleWait keeps the wait for a schedule's tick from spinning when
// the database's clock is a little behind this process's.
const minScheduleWait = 10 * time.Millisecond

// scheduleBatch is how many due schedules one ScheduleFireDue call fires.
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
	at, ok, err := c.cfg.Store.ScheduleNextDue(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("rescuer: read the next schedule tick", service.ErrAttr(err))
		}
		return time.Time{}, false
	}
	return at, ok
}

// fireSchedules starts the tasks of due cron schedules, in batches. A
// schedule whose queue is full is skipped by the store and tried again
// later; its change between firing and skipping is logged once. A failure
// sets firingFailed, so the next try is at the next pass.
func (c *cron) fireSchedules(ctx context.Context) {
	for {
		firings, err := c.cfg.Store.ScheduleFireDue(ctx, scheduleBatch)
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
