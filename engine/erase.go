package engine

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskEraseParams names the task to erase and who asks, and why (both
// recorded in task_erased).
type TaskEraseParams struct {
	Namespace string
	ID        uuid.UUID
	By        string
	Reason    string
}

// EraseTask destroys a finished task's data key (crypto-shredding) and
// appends task_erased in the same write, removing the task's stream
// entries with it: the events stay (types, times,
// attempts, error classes and messages, who did what), while every
// payload sealed with the key (its input, step outputs, output, signal
// payloads, blobs) is unreadable for good, in this database and in every
// copy of it made from now on. It returns the task's state after it.
//
// A task not yet finished is refused ([store.ErrTaskState]), as is one
// without a data key (its namespace was not encrypted when it ran, or it
// never wrote a payload under encryption: nothing of it can be shredded).
// Erasing an erased task again returns its state and writes nothing. The
// caller's codec forgets the key it may hold (payload/seal's Forget).
func EraseTask(ctx context.Context, s store.Store, p *TaskEraseParams) (history.State, error) {
	if p.By == "" {
		return history.State{}, errors.New("erase: By (who asks) is empty")
	}
	for try := 0; try < maxRequeueTries; try++ {
		state, err := eraseOnce(ctx, s, p)
		if !errors.Is(err, store.ErrConflict) {
			return state, err
		}
	}
	return history.State{}, errmark.Mark(errors.Newf("erase task %s: it kept changing; try again", p.ID), store.ErrConflict)
}

func eraseOnce(ctx context.Context, s store.Store, p *TaskEraseParams) (history.State, error) {
	if _, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.ID}); err != nil {
		return history.State{}, errors.Wrapf(err, "erase task %s", p.ID)
	}
	events, err := store.TaskEvents(ctx, s, p.Namespace, p.ID)
	if err != nil {
		return history.State{}, err
	}
	state, err := history.Replay(events)
	if err != nil {
		return history.State{}, errors.Wrapf(err, "erase task %s", p.ID)
	}
	switch {
	case state.Erased:
		return state, nil
	case !state.Status.Terminal():
		return state, errmark.Mark(errors.Newf("erase task %s: it is %s; only a finished task can be erased (cancel it first)", p.ID, state.Status), store.ErrTaskState)
	}
	keys, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: p.Namespace, IDs: []uuid.UUID{p.ID}})
	if err != nil {
		return state, err
	}
	if keys[p.ID] == nil {
		return state, errmark.Mark(errors.Newf("erase task %s: it has no data key (its namespace was not encrypted when it ran, or it wrote no payload under encryption), so nothing of it can be shredded", p.ID), store.ErrTaskState)
	}
	// The event and the removal of the task's stream entries (sealed with
	// the key, and of no use once it is gone) in one transaction.
	tx, err := s.Begin(ctx)
	if err != nil {
		return state, errors.Wrapf(err, "erase task %s", p.ID)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	next, err := tx.EventAppend(ctx, &store.EventAppendParams{
		TaskID: p.ID, State: state, At: Now(),
		Payloads: []history.Payload{history.TaskErasedData{By: p.By, Reason: p.Reason}},
	})
	if err != nil {
		return state, errors.Wrapf(err, "erase task %s", p.ID)
	}
	if _, err := tx.StreamRemove(ctx, &store.StreamRemoveParams{Namespace: p.Namespace, TaskID: p.ID}); err != nil {
		return state, errors.Wrapf(err, "erase task %s", p.ID)
	}
	if err := tx.Commit(ctx); err != nil {
		return state, errors.Wrapf(err, "erase task %s", p.ID)
	}
	return next, nil
}
