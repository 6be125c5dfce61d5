package requests

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Params names a task and who asks something of it, and why.
type Params struct {
	Namespace string
	ID        uuid.UUID
	By        string // recorded in the history; required
	Reason    string
}

// CancelResult says what a cancel did.
type CancelResult struct {
	// State is the task's state after the request.
	State history.State
	// AlreadyRequested is set when an earlier cancel request stands;
	// nothing was appended.
	AlreadyRequested bool
}

// Cancel requests the task's cancellation (cancel_requested). A task
// that is not running and has no completed step to compensate is cancelled
// in the same append (task_cancelled) and never runs again. A running
// task's worker is told (a notification, and its next heartbeat or append)
// and stops at its next checkpoint; a task with completed compensable steps
// is due at once, so a worker compensates them, and so is one with
// unfinished children, so a worker cancels them before it ends the task. Cancelling a task that
// ended otherwise than cancelled is an error marked [store.ErrTaskState]
// naming its status; cancelling twice, or a cancelled task, is not an
// error (AlreadyRequested is set and nothing is appended).
//
// A task that continued as new is a chain of runs: the cancel reaches the
// chain's current run (following at most [MaxChainHops] runs), and that
// run, cancelled, starts no next one.
func Cancel(ctx context.Context, s store.Store, p *Params) (CancelResult, error) {
	q := *p
	for hop := 0; ; hop++ {
		latest, err := LatestRun(ctx, s, p.Namespace, q.ID)
		if err != nil {
			return CancelResult{}, err
		}
		q.ID = latest.ID
		res, err := cancelRun(ctx, s, &q)
		if errors.Is(err, errContinued) {
			if hop < maxChainCancelTries {
				continue // it continued as new meanwhile: on to its next run
			}
			err = errmark.Mark(errors.Wrapf(err, "cancel task %s: its chain's current run kept continuing as new; try again", p.ID), store.ErrConflict)
		}
		return res, err
	}
}

// errContinued is what cancelRun returns for a run that continued as new
// before the cancel was written.
var errContinued = errors.New("task continued as new")

func cancelRun(ctx context.Context, s store.Store, p *Params) (CancelResult, error) {
	var res CancelResult
	state, err := requestOnTask(ctx, s, p, func(state history.State) ([]history.Payload, error) {
		return decideCancel(p, state, &res)
	})
	res.State = state
	return res, err
}

// decideCancel is what a cancel of the run in state appends (setting
// res.AlreadyRequested when nothing is to be), or why it is refused.
func decideCancel(p *Params, state history.State, res *CancelResult) ([]history.Payload, error) {
	if state.Status == history.StatusContinued {
		return nil, errContinued
	}
	if state.Status == history.StatusCancelled {
		res.AlreadyRequested = true // cancelling twice is not an error
		return nil, nil
	}
	if state.Status.Terminal() {
		return nil, errmark.Mark(errors.Newf("cancel task %s: it is %s; only a pending, retrying or running task can be cancelled",
			p.ID, state.Status), store.ErrTaskState)
	}
	if state.CancelRequested {
		res.AlreadyRequested = true
		return nil, nil
	}
	payloads := []history.Payload{history.CancelRequestedData{By: p.By, Reason: p.Reason}}
	if state.Status != history.StatusRunning && state.Compensation == nil && !hasCompensable(state) && !HasChildrenToClose(state) {
		payloads = append(payloads, history.TaskCancelledData{Reason: p.Reason})
	}
	return payloads, nil
}

// Compensate asks for the compensators of a completed task's steps to
// run (compensation_requested): the task is due at once, a worker undoes
// its compensable steps in reverse order, and it ends cancelled. A task
// that is not completed, or has no compensable step, is an error marked
// [store.ErrTaskState].
func Compensate(ctx context.Context, s store.Store, p *Params) (history.State, error) {
	return requestOnTask(ctx, s, p, func(state history.State) ([]history.Payload, error) {
		return decideCompensate(p, state)
	})
}

// decideCompensate is what a compensation request on the task in state
// appends, or why it is refused.
func decideCompensate(p *Params, state history.State) ([]history.Payload, error) {
	if state.Status != history.StatusCompleted {
		return nil, errmark.Mark(errors.Newf("compensate task %s: it is %s; only a completed task is compensated on request",
			p.ID, state.Status), store.ErrTaskState)
	}
	if state.Erased {
		return nil, errmark.Mark(errors.Newf("compensate task %s: its data was erased, so its steps cannot be undone", p.ID), store.ErrTaskState)
	}
	if !hasCompensable(state) {
		return nil, errmark.Mark(errors.Newf("compensate task %s: none of its steps has a compensator", p.ID), store.ErrTaskState)
	}
	return []history.Payload{history.CompensationRequestedData{By: p.By, Reason: p.Reason}}, nil
}

func hasCompensable(state history.State) bool {
	for _, st := range state.CompletedSteps() {
		if st.Compensable {
			return true
		}
	}
	return false
}

// maxChainCancelTries bounds the runs a cancel follows while its chain
// keeps continuing under it: a loop that continues every few steps
// outran five tries on the embedded store (each try is a read and a
// write, each run of the chain several writes).
const maxChainCancelTries = 100

// maxRequestTries bounds the retries of a request that raced a worker's
// append.
const maxRequestTries = 5

// requestOnTask appends what decide returns for the task's current state,
// unfenced (a request is no attempt's), retrying when a worker appended
// first. decide returning no payloads appends nothing.
func requestOnTask(ctx context.Context, s store.Store, p *Params, decide func(history.State) ([]history.Payload, error)) (history.State, error) {
	if p.By == "" {
		return history.State{}, errors.New("request on task: By (who asks) is empty")
	}
	for try := 0; ; try++ {
		if _, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.ID}); err != nil {
			return history.State{}, err
		}
		events, err := store.TaskEvents(ctx, s, p.Namespace, p.ID)
		if err != nil {
			return history.State{}, err
		}
		state, err := history.Replay(events)
		if err != nil {
			return history.State{}, errors.Wrapf(err, "task %s", p.ID)
		}
		payloads, err := decide(state)
		if err != nil || len(payloads) == 0 {
			return state, err
		}
		next, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: p.ID, State: state, Payloads: payloads})
		if errors.Is(err, store.ErrConflict) && try+1 < maxRequestTries {
			continue
		}
		return next, err
	}
}

// HasChildrenToClose reports whether the task has unfinished children its
// end must cancel: then a worker ends it, after requesting their cancels
// (see [CloseChildren]), so the cancel reaches them even if this process
// stops.
func HasChildrenToClose(state history.State) bool {
	return slices.ContainsFunc(state.Children, toClose)
}

// toClose reports whether a parent's end must cancel child c: it has not
// finished, and its policy is cancel.
func toClose(c history.Child) bool {
	return !c.Finished && c.OnParentClose != history.ParentCloseAbandon
}
