package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
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
func RescueExpired(ctx context.Context, s store.Store, max int) (int, error) {
	n, _, err := rescueExpired(ctx, s, store.WallClock, &store.LeaseExpiryParams{Max: max})
	return n, err
}

// rescueExpired is [RescueExpired] of the leases p selects, with the time
// of the rescue from clock. It also returns how many leases it listed.
func rescueExpired(ctx context.Context, s store.Store, clock store.Clock, p *store.LeaseExpiryParams) (rescued, listed int, err error) {
	ids, err := s.TaskListLeaseExpired(ctx, p)
	if err != nil || len(ids) == 0 {
		return 0, 0, err
	}
	rescued, err = rescueTasks(ctx, s, plan.Now(clock), ids)
	return rescued, len(ids), err
}

// rescueTasks appends lease_expired to each of the listed tasks, fenced by
// its epoch and re-checked for expiry by the append.
func rescueTasks(ctx context.Context, s store.Store, now time.Time, ids []uuid.UUID) (int, error) {
	var unreadable []uuid.UUID
	defer func() {
		if len(unreadable) > 0 {
			slog.Default().Error("rescuer: expired tasks with histories this process cannot read", "task_ids", unreadable)
		}
	}()
	appends := make([]*store.EventAppendParams, 0, len(ids))
	for _, id := range ids {
		// Histories load one task at a time: rescue is rare, and one
		// unreadable history must not hold back the rest.
		events, err := store.TaskEvents(ctx, s, "", id)
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
		appends = append(appends, &store.EventAppendParams{
			TaskID: id, State: state, Epoch: state.Lease.Epoch, ExpiredOnly: true,
			Attempt: state.Attempt, Payloads: rescuePayloads(state, now),
			AttemptStartedAt: attemptStart(events),
		})
	}
	if len(appends) == 0 {
		return 0, nil
	}
	// A parent dead-lettered here closes its children first, as its worker
	// would have (a crash before the append closes them again, harmlessly).
	for _, p := range appends {
		if _, ends := p.Payloads[len(p.Payloads)-1].(history.TaskDeadLetteredData); ends && requests.HasChildrenToClose(p.State) {
			if err := requests.CloseChildren(ctx, s, p.State.Scheduled.Namespace, p.TaskID, p.State, "was dead-lettered"); err != nil {
				return 0, err
			}
		}
	}
	// The appends go in one statement; each is fenced on its own.
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return 0, err
	}
	rescued := 0
	for _, res := range results {
		switch {
		case errors.IsAny(res.Err, store.ErrConflict, store.ErrFenced, store.ErrNotFound):
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
	// A task recorded without a budget (0) has the default one, never
	// none: a step that keeps killing its worker is dead-lettered too.
	switch max := history.AttemptBudget(state.Scheduled.MaxAttempts); {
	case state.Budget.Attempts >= max:
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

// attemptStart returns when the latest attempt in events began (zero if
// none did), for the attempt duration of an append made without the
// attempt's own record of it (the rescuer's): its
// store.EventAppendParams.AttemptStartedAt, for the metrics.
func attemptStart(events []history.Event) time.Time {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type() == history.AttemptStarted {
			return events[i].At
		}
	}
	return time.Time{}
}
