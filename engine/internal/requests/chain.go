package requests

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// MaxChainHops bounds the runs one request follows along a chain of runs
// that continued as new ([LatestRun], [Cancel]): each hop is two small
// reads (the run's row and its last event). A chain longer than that past
// the id given is reached through a later run's id.
const MaxChainHops = 1000

// ErrChainTooLong marks a request that met more than [MaxChainHops] runs
// continued as new past the id it was given.
var ErrChainTooLong = errors.New("chain of continued runs too long")

// ContinuedAs returns the run that task t, which ended continued, continued
// as: its task_continued, the last event, read alone; or the last but
// the events a finished run may still get (see [afterFinish]: forks made
// of the run since, its erasure) that follow it, read back in windows
// that grow fourfold.
func ContinuedAs(ctx context.Context, ex store.Executor, t *store.Task) (uuid.UUID, error) {
	if t.Status != history.StatusContinued {
		return uuid.Nil, errors.AssertionFailedf("task %s is %s, not continued", t.ID, t.Status)
	}
	for window := int64(1); ; window *= 4 {
		after := max(t.LastSeq-window, 0)
		byTask, err := ex.EventList(ctx, &store.EventListParams{Namespace: t.Namespace, After: map[uuid.UUID]int64{t.ID: after}})
		if err != nil {
			return uuid.Nil, err
		}
		events := byTask[t.ID]
		if len(events) == 0 {
			return uuid.Nil, errmark.Mark(errors.Newf("task %s: its last event is gone", t.ID), store.ErrNotFound)
		}
		i := len(events) - 1
		for i >= 0 && afterFinish(events[i].Type()) {
			i--
		}
		if i < 0 && after > 0 {
			continue // such events all the way back: look further
		}
		if i < 0 {
			return uuid.Nil, errors.Newf("task %s is continued but has no task_continued", t.ID)
		}
		cont, ok := events[i].Data.(history.TaskContinuedData)
		if !ok {
			return uuid.Nil, errors.Newf("task %s is continued but its last event is %s", t.ID, events[i].Type())
		}
		next, err := uuid.Parse(cont.NextTaskID)
		return next, errors.Wrapf(err, "task %s continued as %q", t.ID, cont.NextTaskID)
	}
}

// LatestRun returns the row of the current run of the chain task id
// belongs to: id's own when it did not continue as new, else the run its
// chain continued as, last, following at most [MaxChainHops] runs (past
// that, an error marked [ErrChainTooLong]). A run removed by retention
// meanwhile is [store.ErrNotFound].
func LatestRun(ctx context.Context, ex store.Executor, namespace string, id uuid.UUID) (*store.Task, error) {
	for hop := 0; ; hop++ {
		t, err := ex.TaskGet(ctx, &store.TaskGetParams{Namespace: namespace, ID: id})
		if err != nil || t.Status != history.StatusContinued {
			return t, err
		}
		if hop == MaxChainHops {
			// Also a task-state refusal, so the edge answers 409, not 500.
			err := errors.Newf("task %s: more than %d runs continued as new follow it; use a later run's id", id, MaxChainHops)
			return nil, errmark.Mark(errmark.Mark(err, ErrChainTooLong), store.ErrTaskState)
		}
		if id, err = ContinuedAs(ctx, ex, t); err != nil {
			return nil, err
		}
	}
}

// afterFinish reports whether an event of type typ may follow a run's
// task_continued: the fold (history.Replay) takes, after a finish that
// nothing reopens, only task_forked and task_erased.
func afterFinish(typ history.Type) bool {
	return typ == history.TaskForked || typ == history.TaskErased
}
