package requests

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// maxSignalTries bounds the retries of a signal that raced another
// append to its task (a worker's, mostly).
const maxSignalTries = 10

// Signal appends signal_received to a task, found by id or by idempotency
// key in p.Namespace: a dedup id already in its history writes nothing
// (Duplicate); a finished task is an error marked [store.ErrTaskState] and
// nothing is written; a task waiting for a signal of that name is due at
// once (run_at is the signal's time) in the same write, and the driver's
// append wakes workers for a task due at once. An unknown task is
// [store.ErrNotFound]. With p.ForWait, see [store.TaskSignalParams].
//
// A signal depends on little of the history: whether its dedup id was
// seen, the wait the task is in, and the projection row (status, run
// time, and the columns the append writes back). So it reads those (the
// row, TaskGet, and the two indexed facts of SignalLookup), not the
// history, whose size (up to the store's [store.HistoryLimits]) would
// otherwise be read and replayed at every signal. signal_received is
// appended at the row's seq, so nothing can come between the reads and
// the write (a write that lost the race is read and decided again). The
// append applies the signal to the state, which makes a task waiting for
// it due at once.
func Signal(ctx context.Context, s store.Executor, p *store.TaskSignalParams) (store.SignalResult, error) {
	if err := checkSignal(p); err != nil {
		return store.SignalResult{}, err
	}
	id := p.TaskID
	var row *store.Task // the first decision's, when the key found it
	if id == uuid.Nil {
		t, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, IdempotencyKey: p.IdempotencyKey})
		if err != nil {
			return store.SignalResult{}, err
		}
		id, row = t.ID, t
	}
	payload := history.SignalReceivedData{Name: p.Name, Payload: p.Payload, Sender: p.Sender, DedupID: p.DedupID}
	for try := 0; ; try++ {
		state, seen, err := signalState(ctx, s, p, id, row)
		row = nil
		if err != nil {
			return store.SignalResult{}, err
		}
		if seen {
			return store.SignalResult{TaskID: id, Duplicate: true, State: state}, nil
		}
		if p.ForWait != nil {
			err := checkForWait(ctx, s, state, id, p.Name, *p.ForWait)
			if errors.Is(err, errHistoryMoved) {
				if try+1 < maxSignalTries {
					continue
				}
				err = waitRefused(errors.Newf("signal %q to task %s for receive %d: the task moves on too fast to tell; try again",
					p.Name, id, *p.ForWait), store.ErrWaitNotReached)
			}
			if err != nil {
				return store.SignalResult{TaskID: id, State: state}, err
			}
		}
		if state.Status.Terminal() {
			return store.SignalResult{TaskID: id, State: state}, errmark.Mark(
				errors.Newf("signal %q to task %s: it is %s; only a task that has not finished receives signals", p.Name, id, state.Status),
				store.ErrTaskState)
		}
		next, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{payload}})
		if errors.Is(err, store.ErrConflict) && try+1 < maxSignalTries {
			continue
		}
		return store.SignalResult{TaskID: id, State: next}, err
	}
}

// errHistoryMoved is checkForWait's answer when the history it read is
// longer than the row the signal is decided on: the signal is decided
// again.
var errHistoryMoved = errors.New("the task's history moved on since its row was read")

// checkForWait refuses a signal for the receive at pos unless the task
// waits there now for name: the next signal of the name appended is then
// the one that receive takes (it found none before it waited, and a
// signal appended before a timeout is taken, not timed out). A receive
// that took a signal without waiting leaves no trace in the history, so
// "not reached" may also mean passed without waiting; the task's next
// wait, or its end, makes it "ended". state is the row's (with its open
// wait); only a refusal reads the history, to tell "ended" from "not
// reached" by the waits it records.
func checkForWait(ctx context.Context, s store.Executor, state history.State, id uuid.UUID, name string, pos int) error {
	if w := state.Wait; w != nil && w.Position == pos && w.Name == name && !state.Status.Terminal() {
		return nil
	}
	passed := state.Status.Terminal() || (state.Wait != nil && state.Wait.Position > pos)
	if !passed {
		events, err := store.TaskEvents(ctx, s, "", id)
		if err != nil {
			return errors.Wrapf(err, "signal task %s", id)
		}
		if int64(len(events)) > state.LastSeq {
			// The task moved on since its row was read (it may have begun
			// this very wait): decide again from a fresh row, not from a
			// history the row's state does not describe.
			return errHistoryMoved
		}
		replayed, err := history.Replay(events)
		if err != nil {
			return errors.Wrapf(err, "signal task %s", id)
		}
		passed = slices.ContainsFunc(replayed.Waits, func(w history.Wait) bool { return w.Position >= pos })
	}
	if passed {
		err := errors.Newf("signal %q to task %s for receive %d: that wait has ended", name, id, pos)
		return waitRefused(err, store.ErrWaitEnded)
	}
	err := errors.Newf("signal %q to task %s for receive %d: the task does not wait there yet", name, id, pos)
	return waitRefused(err, store.ErrWaitNotReached)
}

// waitRefused marks err, a signal for one receive refused, with sentinel
// (ErrWaitEnded or ErrWaitNotReached) and ErrTaskState.
func waitRefused(err, sentinel error) error {
	return errmark.Mark(errmark.Mark(err, sentinel), store.ErrTaskState)
}

// signalState reads what a signal to task id is decided on: the state the
// row projects (see [plan.StateFromRow]) with the wait the task is in, and
// whether p's dedup id was seen. row, when set, is the task's row, read
// just now; otherwise it is read.
func signalState(ctx context.Context, s store.Executor, p *store.TaskSignalParams, id uuid.UUID, row *store.Task) (state history.State, seen bool, err error) {
	t := row
	if t == nil {
		if t, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: id}); err != nil {
			return history.State{}, false, err
		}
	}
	if p.DedupID == "" && t.Status.Terminal() {
		return plan.StateFromRow(t, nil), false, nil
	}
	facts, err := s.SignalLookup(ctx, &store.SignalLookupParams{
		Namespace: p.Namespace, TaskID: id, DedupID: p.DedupID, OpenWait: !t.Status.Terminal(), LastSeq: t.LastSeq,
	})
	if err != nil {
		return history.State{}, false, errors.Wrapf(err, "signal task %s", id)
	}
	return plan.StateFromRow(t, facts.Wait), facts.Seen, nil
}

func checkSignal(p *store.TaskSignalParams) error {
	switch {
	case p.Namespace == "":
		return errors.New("signal: namespace is empty")
	case p.Name == "":
		return errors.New("signal: name is empty")
	case p.TaskID == uuid.Nil && p.IdempotencyKey == "":
		return errors.New("signal: neither a task id nor an idempotency key")
	}
	if len(p.Payload) > 0 {
		if err := jsoncheck.Check(p.Payload, "payload"); err != nil {
			return errors.Wrap(err, "signal")
		}
	}
	return nil
}
