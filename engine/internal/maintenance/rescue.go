package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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
	rescued := 0
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
			return rescued, err
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
		ap := &store.EventAppendParams{
			TaskID: id, State: state, Epoch: state.Lease.Epoch, ExpiredOnly: true,
			Attempt: state.Attempt, Payloads: rescuePayloads(state, now),
			AttemptStartedAt: attemptStart(events),
		}
		if hasOpenReservations(state) {
			if done, err := rescueSettling(ctx, s, ap, events); err != nil {
				return rescued, err
			} else if done {
				rescued++
			}
			continue
		}
		appends = append(appends, ap)
	}
	if len(appends) == 0 {
		return rescued, nil
	}
	// A parent dead-lettered here closes its children first, as its worker
	// would have (a crash before the append closes them again, harmlessly).
	for _, p := range appends {
		if _, ends := p.Payloads[len(p.Payloads)-1].(history.TaskDeadLetteredData); ends && requests.HasChildrenToClose(p.State) {
			if err := requests.CloseChildren(ctx, s, p.State.Scheduled.Namespace, p.TaskID, p.State, "was dead-lettered"); err != nil {
				return rescued, err
			}
		}
	}
	// The appends go in one statement; each is fenced on its own.
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return rescued, err
	}
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

// hasOpenReservations reports whether the expired attempt holds budget
// reservations its worker did not settle.
func hasOpenReservations(state history.State) bool {
	for _, r := range state.Reservations {
		if r.Attempt == state.Attempt {
			return true
		}
	}
	return false
}

// rescueSettling rescues a task whose expired attempt holds budget
// reservations: in one transaction, each is settled (budget_settled,
// reason lease_expired) and the rescue's events appended after them. A
// step whose completion is on record is charged what it reported; one
// that is not is charged its whole reservation, as its call may have been
// made and paid for. It reports whether it rescued the task (not when
// the worker came back, or another rescuer was first).
func rescueSettling(ctx context.Context, s store.Store, ap *store.EventAppendParams, events []history.Event) (bool, error) {
	state := ap.State
	// A dead-lettered parent closes its children first, as in the batch.
	if _, ends := ap.Payloads[len(ap.Payloads)-1].(history.TaskDeadLetteredData); ends && requests.HasChildrenToClose(state) {
		if err := requests.CloseChildren(ctx, s, state.Scheduled.Namespace, ap.TaskID, state, "was dead-lettered"); err != nil {
			return false, err
		}
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rest := ap.Payloads
	open := ap.State.Reservations
	for i, r := range open {
		if r.Attempt != state.Attempt {
			continue
		}
		tokens, usd := r.Tokens, r.CostUSD
		if usage, done := stepUsage(events, r.Attempt, r.Position); done {
			tokens, usd = requests.UsageTotals(usage)
		}
		p := &requests.SettleParams{
			Append:   store.EventAppendParams{TaskID: ap.TaskID, State: state, Epoch: ap.Epoch, ExpiredOnly: true, Attempt: ap.Attempt, At: ap.At},
			Position: r.Position, Step: r.Step, Reason: history.SettleLeaseExpired, Reserved: true, Tokens: tokens, CostUSD: usd,
		}
		if last := !slices.ContainsFunc(open[i+1:], func(o history.Reservation) bool { return o.Attempt == state.Attempt }); last {
			p.Append.Payloads, p.Append.AttemptStartedAt = rest, ap.AttemptStartedAt
		}
		next, err := requests.Settle(ctx, tx, p)
		if errors.IsAny(err, store.ErrConflict, store.ErrFenced, store.ErrNotFound) {
			return false, nil // the worker came back, finished, or someone else rescued it
		}
		if err != nil {
			return false, err
		}
		state = next
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// stepUsage returns the usage the step at position recorded in attempt,
// and whether its completion is on record there.
func stepUsage(events []history.Event, attempt, position int) ([]history.Usage, bool) {
	for _, e := range events {
		if d, ok := e.Data.(history.StepCompletedData); ok && e.Attempt == attempt && d.Position == position && d.CopiedFromSeq == 0 {
			return d.Usage, true
		}
	}
	return nil, false
}
