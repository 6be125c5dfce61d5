package executor

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// KindBadContinueInput is the error kind of a workflow whose
// continue-as-new input was refused (not storable JSON, or over
// MaxPayloadBytes). It is always permanent.
const KindBadContinueInput = "bad_continue_input"

// checkContinue refuses the next run's input as a start refuses one: JSON
// both stores take alike, within MaxPayloadBytes (a start's input stays in
// the history whatever the blob threshold).
func (h *Handler) checkContinue(req *interpreter.ContinueAsNewRequest) error {
	fail := func(err error) error {
		return activities.WithKind(activities.Permanent(errmark.Mark(err, interpreter.ErrBadContinueInput)), KindBadContinueInput)
	}
	if len(req.Input) > 0 {
		if err := jsoncheck.CheckMarshaled(req.Input, "input"); err != nil {
			return fail(errors.Wrap(err, "continue as new"))
		}
	}
	if h.maxPayload > 0 && len(req.Input) > h.maxPayload {
		return fail(errors.Newf("continue as new: the input is %d bytes of JSON, over the limit of %d bytes (MaxPayloadBytes): carry a reference to large state (a blob, a URL)",
			len(req.Input), h.maxPayload))
	}
	return nil
}

// nextRun is the start of the run a continue-as-new of a's task begins:
// the same workflow, queue, priority, labels, trace, fairness, retry
// budget, schedule-to-close deadline and parent, with input, due now,
// naming the run it continues; every budget that covered the run covers
// it (the run's own by the run's id, so the chain spends one budget).
func nextRun(a *edge.Attempt, input []byte, budgets []history.TaskBudget) store.TaskStartParams {
	sc := a.State().Scheduled
	runID := a.Task.ID.String()
	return store.TaskStartParams{Namespace: a.Task.Namespace, Scheduled: history.TaskScheduledData{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Priority: sc.Priority,
		Input: input, RunAt: engine.Now(), TraceID: sc.TraceID, Labels: sc.Labels,
		MaxAttempts: sc.MaxAttempts, Deadline: sc.Deadline,
		FairnessKey: sc.FairnessKey, FairnessWeight: sc.FairnessWeight,
		ParentID: sc.ParentID, ParentPosition: sc.ParentPosition,
		ContinuedFrom: runID, Budgets: budgets,
	}}
}

// continueAsNew ends a's run continued as new, after closing its
// unfinished children by their policy. It returns engine.ErrEnded once
// the end is written; a cancel requested first turns it into the
// cancel's compensation; a signal that arrived first hands the attempt
// back (task_released), for the workflow to replay with it. Any other
// failure (a full queue, a conflict that kept coming back, a database
// error, closing the children) fails the attempt transiently (done false:
// the caller writes the outcome of res with that error, and the last step
// with it, so the step does not run again); only a lost lease writes
// nothing, as another attempt owns the task.
func (h *Handler) continueAsNew(a *edge.Attempt, typ Type, req *interpreter.ContinueAsNewRequest, pending edge.Events) (ev edge.Events, done bool, err error) {
	durable := a.DurableContext()
	if len(a.State().Children) > 0 {
		if err := a.CloseChildren(durable, "continued as new"); err != nil {
			return edge.Events{}, false, activities.Transient(errors.Wrap(err, "close the task's children"))
		}
	}
	budgets, err := inheritedBudgets(a)
	if err != nil {
		return edge.Events{}, false, activities.Transient(err)
	}
	_, err = a.ContinueAsNew(durable, pending, nextRun(a, req.Input, budgets))
	switch {
	case err == nil:
		return edge.Events{}, true, engine.ErrEnded
	case errors.Is(err, engine.ErrCancelRequested):
		ev, err := h.compensate(a, typ, history.CompensateCancelled, nil, pending)
		return ev, true, err
	case errors.Is(err, engine.ErrSignalArrived):
		// A signal reached the run first: hand the attempt back (with the
		// last step on record), so the next attempt replays with it.
		released, err := a.Encode(durable, history.TaskReleasedData{
			WorkerID: a.WorkerID(), LeaseEpoch: a.State().Lease.Epoch, Reason: "a signal arrived before the run continued as new",
		})
		if err != nil {
			return edge.Events{}, true, err
		}
		return pending.Then(released), true, nil
	case errors.Is(err, store.ErrFenced) || a.LeaseContext().Err() != nil:
		return edge.Events{}, true, err
	}
	return edge.Events{}, false, activities.Transient(err)
}
