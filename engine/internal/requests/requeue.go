package requests

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// RequeueParams describes a requeue of dead-lettered tasks.
type RequeueParams struct {
	Namespace string
	IDs       []uuid.UUID // at most one entry per task
	// By names who asks (an operator, a service): it is recorded.
	By     string
	Reason string
}

// RequeueResult is the outcome of one task's requeue.
type RequeueResult struct {
	ID  uuid.UUID
	Err error // nil: requeued; else marked ErrNotFound, ErrTaskState or ErrConflict
}

// MaxRequeueTries bounds the retries of a requeue that raced another
// writer; a dead-lettered task has no worker, so a race is rare.
const MaxRequeueTries = 3

// Requeue sends dead-lettered tasks back to their queue: task_requeued
// (who, why) is appended and the task is due at once. Its attempt count
// goes on, and its retry budget starts afresh. Each task succeeds or fails
// on its own; the returned error is for the batch as a whole. A task of
// another namespace is reported not found.
func Requeue(ctx context.Context, s store.Store, p *RequeueParams) ([]RequeueResult, error) {
	if p.By == "" {
		return nil, errors.New("requeue: By (who asks) is empty")
	}
	out := make([]RequeueResult, len(p.IDs))
	pending := make(map[uuid.UUID]int, len(p.IDs)) // id → index in out, still to do
	for i, id := range p.IDs {
		out[i].ID = id
		if _, dup := pending[id]; dup {
			return nil, errors.Newf("requeue: task %s named twice", id)
		}
		pending[id] = i
	}
	for try := 0; try < MaxRequeueTries && len(pending) > 0; try++ {
		if err := requeueOnce(ctx, s, p, pending, out); err != nil {
			return nil, err
		}
	}
	for _, i := range pending {
		out[i].Err = errmark.Mark(errors.Newf("requeue task %s: it kept changing; try again", out[i].ID), store.ErrConflict)
	}
	return out, nil
}

// requeueOnce tries every pending task once and removes from pending those
// settled (requeued or refused); conflicts stay for another try.
func requeueOnce(ctx context.Context, s store.Store, p *RequeueParams, pending map[uuid.UUID]int, out []RequeueResult) error {
	ids := make([]uuid.UUID, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{Namespace: p.Namespace, IDs: ids})
	if err != nil {
		return err
	}
	inNamespace := make(map[uuid.UUID]bool, len(tasks))
	for _, t := range tasks {
		inNamespace[t.ID] = t.Namespace == p.Namespace
	}
	events, err := s.EventList(ctx, store.EventListAll(p.Namespace, ids...))
	if err != nil {
		return err
	}
	states := make(map[uuid.UUID]history.State, len(ids))
	replayErrs := make(map[uuid.UUID]error)
	for _, id := range ids {
		if states[id], err = history.Replay(events[id]); err != nil {
			replayErrs[id] = err
		}
	}
	orphans, err := removedParents(ctx, s, states)
	if err != nil {
		return err
	}
	now := plan.Now(nil)
	var appends []*store.EventAppendParams
	for _, id := range ids {
		i := pending[id]
		state, err := states[id], replayErrs[id]
		switch {
		case !inNamespace[id]:
			out[i].Err = errmark.Mark(errors.Newf("requeue task %s: no such task", id), store.ErrNotFound)
		case err != nil:
			out[i].Err = errors.Wrapf(err, "requeue task %s", id)
		case state.Status == history.StatusDeadLettered && orphans[id]:
			out[i].Err = errmark.Mark(errors.Newf("requeue task %s: its parent task %s was removed by retention, so nothing would hear its end; start a new task instead",
				id, state.Scheduled.ParentID), store.ErrTaskState)
		case state.Status == history.StatusDeadLettered && state.Erased:
			out[i].Err = errmark.Mark(errors.Newf("requeue task %s: its data was erased, so it cannot run again; start a new task instead", id), store.ErrTaskState)
		case state.Status != history.StatusDeadLettered:
			out[i].Err = errmark.Mark(errors.Newf("requeue task %s: it is %s; only a dead-lettered task can be retried", id, state.Status), store.ErrTaskState)
		case state.Scheduled.Deadline != nil && !now.Before(*state.Scheduled.Deadline) &&
			state.Compensation == nil && !state.CancelRequested: // compensation may resume after the deadline
			out[i].Err = errmark.Mark(errors.Newf("requeue task %s: its deadline %s has passed; a retry would end at once (start a new task instead)",
				id, state.Scheduled.Deadline.Format(time.RFC3339)), store.ErrTaskState)
		default:
			appends = append(appends, &store.EventAppendParams{
				TaskID: id, State: state, At: now,
				Payloads: []history.Payload{history.TaskRequeuedData{By: p.By, Reason: p.Reason}},
			})
			continue
		}
		delete(pending, id)
	}
	if len(appends) == 0 {
		return nil
	}
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return err
	}
	for k, res := range results {
		id := appends[k].TaskID
		if errors.Is(res.Err, store.ErrConflict) {
			continue // someone else appended first: read again
		}
		out[pending[id]].Err = res.Err
		delete(pending, id)
	}
	return nil
}

// removedParents returns the children among states whose parent task no
// longer exists (retention removed it once the family had finished): a
// requeued child would run with nobody to report to. A removal committing
// after this read is not seen (docs/guarantees.md, Retention).
func removedParents(ctx context.Context, s store.Store, states map[uuid.UUID]history.State) (map[uuid.UUID]bool, error) {
	parentOf := make(map[uuid.UUID]uuid.UUID)
	var parents []uuid.UUID
	for id, st := range states {
		if st.Scheduled.ParentID == "" {
			continue
		}
		parent, err := uuid.Parse(st.Scheduled.ParentID)
		if err != nil {
			return nil, errors.Wrapf(err, "requeue task %s: parent id", id)
		}
		parentOf[id] = parent
		parents = append(parents, parent)
	}
	if len(parents) == 0 {
		return nil, nil
	}
	// The parents' ids come from the children's histories: "" reads them
	// in whatever namespace they are.
	found, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: parents})
	if err != nil {
		return nil, err
	}
	exists := make(map[uuid.UUID]bool, len(found))
	for _, t := range found {
		exists[t.ID] = true
	}
	orphans := make(map[uuid.UUID]bool)
	for id, parent := range parentOf {
		if !exists[parent] {
			orphans[id] = true
		}
	}
	return orphans, nil
}
