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
// reads and appends: finding a task by its idempotency key, and the two
// facts of its history a signal depends on, read through indexes.
type SignalDriver interface {
	store.Store
	// TaskIDByKey returns the task holding key in namespace, or an error
	// marked store.ErrNotFound.
	TaskIDByKey(ctx context.Context, namespace, key string) (uuid.UUID, error)
	// SignalSeen reports whether task id's history holds a signal with
	// dedupID.
	SignalSeen(ctx context.Context, id uuid.UUID, dedupID string) (bool, error)
	// OpenWait returns the wait_started of the wait task id is in after
	// its first lastSeq events (history.State.Wait), or nil: its last
	// wait_started, unless a wait_timed_out or a signal of the wait's
	// name follows it.
	OpenWait(ctx context.Context, id uuid.UUID, lastSeq int64) (*history.WaitStartedData, error)
}

// Signal is [store.Store.TaskSignal] over a driver's reads and its
// optimistic append. A signal depends on little of the history: whether
// its dedup id was seen, the wait the task is in, and the projection row
// (status, run time, and the columns the append writes back). So it reads
// those (the row, and the driver's two indexed reads), not the history,
// whose size (up to the store's [store.HistoryLimits]) would otherwise be
// read and replayed at every signal. signal_received is appended at the
// row's seq, so nothing can come between the reads and the write (a write
// that lost the race is read and decided again). The append applies the
// signal to the state, which makes a task waiting for it due at once, and
// the driver's append wakes workers for a task due at once.
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
		state, seen, err := signalState(ctx, d, p, id)
		if err != nil {
			return store.SignalResult{}, err
		}
		if seen {
			return store.SignalResult{TaskID: id, Duplicate: true, State: state}, nil
		}
		if p.ForWait != nil {
			err := checkForWait(ctx, d, state, id, p.Name, *p.ForWait)
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
		next, err := d.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{payload}})
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
func checkForWait(ctx context.Context, d SignalDriver, state history.State, id uuid.UUID, name string, pos int) error {
	if w := state.Wait; w != nil && w.Position == pos && w.Name == name && !state.Status.Terminal() {
		return nil
	}
	passed := state.Status.Terminal() || (state.Wait != nil && state.Wait.Position > pos)
	if !passed {
		events, err := store.TaskEvents(ctx, d, "", id)
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
// row projects (see [StateFromRow]) with the wait the task is in, and
// whether p's dedup id was seen.
func signalState(ctx context.Context, d SignalDriver, p *store.TaskSignalParams, id uuid.UUID) (state history.State, seen bool, err error) {
	t, err := d.TaskGetByID(ctx, p.Namespace, id)
	if err != nil {
		return history.State{}, false, err
	}
	if p.DedupID != "" {
		if seen, err = d.SignalSeen(ctx, id, p.DedupID); err != nil {
			return history.State{}, false, errors.Wrapf(err, "signal task %s", id)
		}
	}
	var wait *history.WaitStartedData
	if !t.Status.Terminal() {
		if wait, err = d.OpenWait(ctx, id, t.LastSeq); err != nil {
			return history.State{}, false, errors.Wrapf(err, "signal task %s", id)
		}
	}
	return StateFromRow(t, wait), seen, nil
}

// StateFromRow is the state a task's projection row holds, with the wait
// it is in (nil: none). It lacks what the row does not keep (steps,
// signals, children, compensation, the retry budget), so it serves an
// append that neither reads nor changes those: a signal's. Everything the
// append writes back to the row comes from the row, so the row stays
// equal to the replay.
func StateFromRow(t *store.Task, wait *history.WaitStartedData) history.State {
	s := history.State{
		Scheduled: ScheduledFromRow(t), Status: t.Status, Attempt: t.Attempt, RunAt: t.RunAt,
		Lease:     history.Lease{Owner: t.LeaseOwner, Epoch: t.LeaseEpoch},
		LastError: t.LastError, Output: t.Output, CancelRequested: t.CancelRequest, LastSeq: t.LastSeq,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if t.StartedAt != nil {
		s.StartedAt = *t.StartedAt
	}
	if t.FinishedAt != nil {
		s.FinishedAt = *t.FinishedAt
	}
	if wait != nil {
		s.Wait = &history.Wait{Position: wait.Position, Name: wait.Name, Deadline: wait.Deadline}
	}
	return s
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

// DecodeWait decodes the data of a wait_started event, as a driver's
// OpenWait reads it.
func DecodeWait(data []byte) (*history.WaitStartedData, error) {
	payload, err := history.Decode(history.WaitStarted, data)
	if err != nil {
		return nil, err
	}
	w, ok := payload.(history.WaitStartedData)
	if !ok {
		return nil, errors.AssertionFailedf("wait_started decoded as %T", payload)
	}
	w = NormalizePayload(w).(history.WaitStartedData)
	return &w, nil
}
