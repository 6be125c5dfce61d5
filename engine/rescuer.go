package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// RescueExpired turns up to max expired leases into lease_expired and a
// reschedule: the task is due again at once, and another worker resumes it
// after its last recorded step. A task whose expired attempt was its last
// allowed one is dead-lettered instead, so a task that crashes every worker
// that takes it cannot loop forever. It returns how many tasks it rescued.
//
// It is safe to run concurrently with workers and other rescuers: each
// append is fenced by the expired epoch and re-checks expiry by the database
// clock, so a lease extended meanwhile is left alone.
func RescueExpired(ctx context.Context, s Store, max int) (int, error) {
	ids, err := s.TaskListLeaseExpired(ctx, max)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return rescueTasks(ctx, s, ids)
}

// rescueTasks appends lease_expired to each of the listed tasks, fenced by
// its epoch and re-checked for expiry by the append.
func rescueTasks(ctx context.Context, s Store, ids []uuid.UUID) (int, error) {
	var unreadable []uuid.UUID
	defer func() {
		if len(unreadable) > 0 {
			slog.Default().Error("rescuer: expired tasks with histories this process cannot read", "task_ids", unreadable)
		}
	}()
	now := Now()
	appends := make([]*EventAppendParams, 0, len(ids))
	for _, id := range ids {
		// Histories load one task at a time: rescue is rare, and one
		// unreadable history must not hold back the rest.
		events, err := s.EventListByTask(ctx, id)
		if err != nil && !errors.Is(err, history.ErrInvalidHistory) {
			return 0, err
		}
		var state history.State
		if err == nil {
			state, err = history.Replay(events)
		}
		if err != nil {
			// Not this process's to judge (a newer cairn may read it); the
			// other expired tasks must not wait behind it.
			unreadable = append(unreadable, id)
			continue
		}
		if state.Status != history.StatusRunning || state.Lease.Owner == "" {
			continue // finished between the two reads
		}
		appends = append(appends, &EventAppendParams{
			TaskID: id, State: state, Epoch: state.Lease.Epoch, ExpiredOnly: true,
			Attempt: state.Attempt, Payloads: rescuePayloads(state, now),
			AttemptStartedAt: attemptStart(events),
		})
	}
	if len(appends) == 0 {
		return 0, nil
	}
	// The appends go in one statement; each is fenced on its own.
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return 0, err
	}
	rescued := 0
	for _, res := range results {
		switch {
		case errors.IsAny(res.Err, ErrConflict, ErrFenced, ErrNotFound):
			// the worker came back, finished, or someone else rescued it
		case res.Err != nil:
			return rescued, res.Err
		default:
			rescued++
		}
	}
	return rescued, nil
}

func rescuePayloads(state history.State, now time.Time) []history.Payload {
	out := []history.Payload{history.LeaseExpiredData{
		WorkerID: state.Lease.Owner, LeaseEpoch: state.Lease.Epoch, NextRunAt: now,
	}}
	evidence := history.ErrorInfo{
		Class:        history.Transient,
		Kind:         "lease_expired",
		Message:      fmt.Sprintf("worker %s stopped renewing its lease", state.Lease.Owner),
		ClassifiedBy: "rule:lease_expired",
	}
	switch max := state.Scheduled.MaxAttempts; {
	case max > 0 && state.Budget.Attempts >= max:
		out = append(out, history.TaskDeadLetteredData{
			Reason: fmt.Sprintf("lease expired on attempt %d of %d", state.Budget.Attempts, max),
			Error:  evidence,
		})
	case state.Scheduled.Deadline != nil && !now.Before(*state.Scheduled.Deadline) &&
		state.Compensation == nil && !state.CancelRequested: // undoing work is not bound by the deadline
		out = append(out, history.TaskDeadLetteredData{
			Reason: fmt.Sprintf("lease expired after the deadline %s", state.Scheduled.Deadline.Format(time.RFC3339)),
			Error:  evidence,
		})
	}
	return out
}

// ExpireStartDeadlines ends up to max tasks that were not started by their
// start deadline with task_expired, and returns how many it ended. The
// claim never starts such a task, so it cannot race a worker; each append
// is still fenced by the task's seq.
func ExpireStartDeadlines(ctx context.Context, s Store, max int) (int, error) {
	ids, err := s.TaskListStartExpired(ctx, max)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return expireTasks(ctx, s, ids)
}

// expireTasks appends task_expired to each of the listed tasks still
// pending, unstarted, with a start deadline.
func expireTasks(ctx context.Context, s Store, ids []uuid.UUID) (int, error) {
	events, err := s.EventListByTasks(ctx, ids)
	if err != nil {
		return 0, err
	}
	appends := make([]*EventAppendParams, 0, len(ids))
	for _, id := range ids {
		state, err := history.Replay(events[id])
		if err != nil || state.Status != history.StatusPending || state.Attempt != 0 || state.Scheduled.StartDeadline == nil {
			continue // unreadable here, or it moved on
		}
		appends = append(appends, &EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{history.TaskExpiredData{
			Reason: fmt.Sprintf("not started by its start deadline %s", state.Scheduled.StartDeadline.Format(time.RFC3339Nano)),
		}}})
	}
	if len(appends) == 0 {
		return 0, nil
	}
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return 0, err
	}
	expired := 0
	for _, res := range results {
		if res.Err == nil {
			expired++
		}
	}
	return expired, nil
}

// RescuerConfig configures a [Rescuer].
type RescuerConfig struct {
	Store Store
	// Owner identifies this process in the leader lease. Required.
	Owner string
	// Interval between passes. Default 5s.
	Interval time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Rescuer is the leader-only service that runs [Store.RescueExpired]
// periodically. Every process may run one; only the holder of the "rescuer"
// leader lease does the work.
type Rescuer struct {
	cfg    RescuerConfig
	svc    service
	outage *outage // the database out of reach, logged once per change of state
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
		if leader {
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
		n, err := RescueExpired(ctx, r.cfg.Store, 100)
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
			return true
		}
	}
}

// fireSchedules starts the tasks of due cron schedules, in batches.
func (r *Rescuer) fireSchedules(ctx context.Context) {
	for {
		n, err := r.cfg.Store.ScheduleFireDue(ctx, 100)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: fire cron schedules", errAttr(err))
			}
			return
		}
		if n < 100 {
			return
		}
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
