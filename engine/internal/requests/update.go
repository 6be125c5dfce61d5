package requests

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// UpdateParams is an update a validator accepted, to record: the task's
// history must still end at Seen, the seq of the last event the
// validator's replay saw.
type UpdateParams struct {
	Namespace string
	TaskID    uuid.UUID
	// Seen is the LastSeq of the state the update was validated on.
	Seen int64
	// Accepted is the update_accepted to append; its args encoded.
	Accepted history.UpdateAcceptedData
}

// UpdateResult says what [AcceptUpdate] did.
type UpdateResult struct {
	// State is the task's state after the append, or as read when
	// nothing was written.
	State history.State
	// Existing is set when the history holds the update id already
	// (accepted before): nothing was written, and State has its outcome
	// when it has one.
	Existing bool
}

// ErrUpdateMoved marks an update refused because the task's history
// moved on since Seen: the caller validates it again, on the new state.
var ErrUpdateMoved = errors.New("the task's history moved on since the update was validated")

// UpdateState reads task id of namespace and replays its history: the
// state an update is validated and decided on. An unknown task is
// [store.ErrNotFound].
func UpdateState(ctx context.Context, s store.Executor, namespace string, id uuid.UUID) (history.State, error) {
	if _, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: namespace, ID: id}); err != nil {
		return history.State{}, err
	}
	events, err := store.TaskEvents(ctx, s, namespace, id)
	if err != nil {
		return history.State{}, errors.Wrapf(err, "update task %s", id)
	}
	state, err := history.Replay(events)
	return state, errors.Wrapf(err, "update task %s", id)
}

// AcceptUpdate appends p's update_accepted to its task, fenced on p.Seen:
// an update id the history holds already writes nothing (Existing); a
// finished task is an error marked [store.ErrTaskState]; a history that
// moved on since Seen is [ErrUpdateMoved] (validate again). The append
// makes a task that waits (a signal, a timer, its children) due at once,
// and the driver's append wakes workers for it. The history is read (up
// to the store's HistoryLimits) to find the id: updates are rare beside
// signals, and their ids are not indexed.
func AcceptUpdate(ctx context.Context, s store.Executor, p *UpdateParams) (UpdateResult, error) {
	if err := checkUpdate(p); err != nil {
		return UpdateResult{}, err
	}
	state, err := UpdateState(ctx, s, p.Namespace, p.TaskID)
	if err != nil {
		return UpdateResult{}, err
	}
	if _, ok := state.UpdateByID(p.Accepted.UpdateID); ok {
		return UpdateResult{State: state, Existing: true}, nil
	}
	if state.Status.Terminal() {
		return UpdateResult{State: state}, errmark.Mark(
			errors.Newf("update %q to task %s: it is %s; only a task that has not finished takes updates", p.Accepted.Name, p.TaskID, state.Status),
			store.ErrTaskState)
	}
	if state.LastSeq != p.Seen {
		return UpdateResult{State: state}, errmark.Mark(errors.Newf("update %q to task %s: validated at event %d, the history is at %d",
			p.Accepted.Name, p.TaskID, p.Seen, state.LastSeq), ErrUpdateMoved)
	}
	next, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: p.TaskID, State: state, Payloads: []history.Payload{p.Accepted}})
	if errors.Is(err, store.ErrConflict) {
		return UpdateResult{State: state}, errmark.Mark(errors.Wrapf(err, "update %q to task %s", p.Accepted.Name, p.TaskID), ErrUpdateMoved)
	}
	if err != nil {
		return UpdateResult{State: state}, err
	}
	return UpdateResult{State: next}, nil
}

func checkUpdate(p *UpdateParams) error {
	switch {
	case p.Namespace == "":
		return errors.New("update: namespace is empty")
	case p.TaskID == uuid.Nil:
		return errors.New("update: no task id")
	}
	if err := history.ValidUpdateText("id", p.Accepted.UpdateID, history.MaxUpdateIDBytes); err != nil {
		return errors.Wrap(err, "update")
	}
	if err := history.ValidUpdateText("name", p.Accepted.Name, history.MaxUpdateNameBytes); err != nil {
		return errors.Wrap(err, "update")
	}
	if len(p.Accepted.Args) > 0 {
		if err := jsoncheck.Check(p.Accepted.Args, "args"); err != nil {
			return errors.Wrap(err, "update")
		}
	}
	return nil
}
