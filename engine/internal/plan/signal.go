package plan

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// maxSignalTries bounds the retries of a signal that raced another
// append to its task (a worker's, mostly).
const maxSignalTries = 10

// SignalDriver is what [Signal] needs of a driver beyond the store's
// reads and appends: finding a task by its idempotency key.
type SignalDriver interface {
	store.Store
	// TaskIDByKey returns the task holding key in namespace, or an error
	// marked store.ErrNotFound.
	TaskIDByKey(ctx context.Context, namespace, key string) (uuid.UUID, error)
}

// Signal is [store.Store.TaskSignal] over a driver's reads and its
// optimistic append: the history is read and replayed, the dedup id and
// the status checked against it, and signal_received appended at the seq
// read, so nothing can come between the check and the write (a write that
// lost the race is read and decided again). The append replays the signal
// onto the state, which makes a task waiting for it due at once, and the
// driver's append wakes workers for a task due at once.
func Signal(ctx context.Context, d SignalDriver, p *store.TaskSignalParams) (store.SignalResult, error) {
	if err := checkSignal(p); err != nil {
		return store.SignalResult{}, err
	}
	id, err := signalTarget(ctx, d, p)
	if err != nil {
		return store.SignalResult{}, err
	}
	payload := history.SignalReceivedData{Name: p.Name, Payload: p.Payload, Sender: p.Sender, DedupID: p.DedupID}
	for try := 0; ; try++ {
		if _, err := d.TaskGetByID(ctx, p.Namespace, id); err != nil {
			return store.SignalResult{}, err
		}
		events, err := d.EventListByTask(ctx, id)
		if err != nil {
			return store.SignalResult{}, err
		}
		state, err := history.Replay(events)
		if err != nil {
			return store.SignalResult{}, errors.Wrapf(err, "signal task %s", id)
		}
		if p.DedupID != "" && state.HasSignal(p.DedupID) {
			return store.SignalResult{TaskID: id, Duplicate: true, State: state}, nil
		}
		if p.ForWait != nil {
			if err := checkForWait(state, id, p.Name, *p.ForWait); err != nil {
				return store.SignalResult{TaskID: id, State: state}, err
			}
		}
		if state.Status.Terminal() {
			return store.SignalResult{TaskID: id, State: state}, errmark.Mark(
				errors.Newf("signal %q to task %s: it is %s; only a task that has not finished receives signals", p.Name, id, state.Status),
				store.ErrTaskState)
		}
		next, err := d.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{payload}})
		if errors.Is(err, store.ErrConflict) && try+1 < maxSignalTries {
			continue
		}
		return store.SignalResult{TaskID: id, State: next}, err
	}
}

// checkForWait refuses a signal for the receive at pos unless the task
// waits there now for name: the next signal of the name appended is then
// the one that receive takes (it found none before it waited, and a
// signal appended before a timeout is taken, not timed out). A receive
// that took a signal without waiting leaves no trace in the history, so
// "not reached" may also mean passed without waiting; the task's next
// wait, or its end, makes it "ended".
func checkForWait(state history.State, id uuid.UUID, name string, pos int) error {
	if w := state.Wait; w != nil && w.Position == pos && w.Name == name && !state.Status.Terminal() {
		return nil
	}
	passed := slices.ContainsFunc(state.Waits, func(w history.Wait) bool { return w.Position >= pos })
	if state.Status.Terminal() || passed {
		err := errors.Newf("signal %q to task %s for receive %d: that wait has ended", name, id, pos)
		return errmark.Mark(errmark.Mark(err, store.ErrWaitEnded), store.ErrTaskState)
	}
	err := errors.Newf("signal %q to task %s for receive %d: the task does not wait there yet", name, id, pos)
	return errmark.Mark(errmark.Mark(err, store.ErrWaitNotReached), store.ErrTaskState)
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

func signalTarget(ctx context.Context, d SignalDriver, p *store.TaskSignalParams) (uuid.UUID, error) {
	if p.TaskID != uuid.Nil {
		return p.TaskID, nil
	}
	return d.TaskIDByKey(ctx, p.Namespace, p.IdempotencyKey)
}
