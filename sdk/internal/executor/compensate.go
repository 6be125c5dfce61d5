package executor

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
	"github.com/cockroachdb/errors"
)

// errCompensate tells HandleAttempt that a permanent failure is to be
// followed by compensation.
type errCompensate struct{ cause history.ErrorInfo }

func (e *errCompensate) Error() string { return "compensate after: " + e.cause.Message }

// compensationReason says why an attempt that begins with a cancel or
// compensation request compensates.
func compensationReason(state history.State) string {
	if state.Compensation != nil {
		return state.Compensation.Reason
	}
	return history.CompensateCancelled
}

// compensate undoes the task's completed compensable steps in reverse order
// of completion, recording each (step_compensated), and returns the events
// that end the attempt: task_cancelled or task_failed when all are undone;
// attempt_failed with a retry when a compensator failed transiently;
// compensation_failed and task_dead_lettered when one failed for good.
// pending is a step the attempt completed but has not recorded yet.
func (h *Handler) compensate(a *edge.Attempt, typ Type, reason string, cause *history.ErrorInfo, pending edge.Events) (edge.Events, error) {
	durable := a.DurableContext()
	if reason == history.CompensateCancelled {
		// The cancel may have reached this attempt (notification,
		// heartbeat) before its history showed it.
		if err := a.SyncCancel(durable); err != nil {
			return edge.Events{}, err
		}
	}
	if pending.Len() > 0 {
		if err := a.Append(durable, pending); err != nil {
			return edge.Events{}, errors.Wrap(err, "record the last step before compensating")
		}
	}
	ctx := a.LeaseContext() // a cancel request must not stop compensation
	state := a.State()
	if !state.Compensation.IsStarted() {
		steps := compensablePositions(state)
		if len(steps) == 0 && reason != history.CompensateFailed {
			return a.Encode(durable, history.TaskCancelledData{Reason: reason})
		}
		if err := appendEvents(a, history.CompensationStartedData{Reason: reason, Steps: steps, Error: cause}); err != nil {
			return edge.Events{}, errors.Wrap(err, "record compensation_started")
		}
		state = a.State()
	}
	// The compensators are Go code: run the workflow over its recorded
	// steps, without running any, to learn each step's options.
	taskID := a.Task.ID.String()
	// The outputs kept by reference, read back: the replay decodes them,
	// and a compensator is handed its step's output.
	resolved, err := resolveOutputs(ctx, a, state)
	if err != nil {
		return edge.Events{}, err
	}
	input, err := a.Input(ctx) // an input kept by reference, read back
	if err != nil {
		return edge.Events{}, err
	}
	collected := interpreter.Run(interpreter.RunParams{
		TaskID: taskID, Attempt: state.Attempt, Steps: resolved.Steps, Ahead: resolved.Ahead, Patches: state.Patches, Context: ctx, CollectOnly: true,
		Record: func(history.Payload) error { return errors.New("a collect-only run records nothing") },
	}, typ.Func, input)
	for len(state.Compensation.Pending) > 0 {
		select {
		case <-a.Stopping():
			// Hand the task back between compensators: the next attempt
			// resumes with the next one.
			return edge.Events{}, engine.ErrReleased
		default:
		}
		pos := state.Compensation.Pending[0]
		step, _ := resolved.StepAt(pos) // compensation_started named completed steps
		opts := collected.Visited[pos]
		if opts == nil || opts.Compensate == nil {
			info := history.ErrorInfo{Class: history.Permanent, Kind: "no_compensator", ClassifiedBy: "rule:no_compensator",
				Step: step.Name, Position: pos,
				Message: fmt.Sprintf("step %d (%s) was recorded as compensable, but the workflow no longer gives it a compensator", pos, step.Name)}
			return a.Encode(durable, compensationFailed(pos, step.Name, info)...)
		}
		err := runCompensator(ctx, a, taskID, step, opts)
		if err != nil {
			if ctx.Err() != nil {
				return edge.Events{}, interrupted(a, ctx)
			}
			return a.Encode(durable, h.compensatorFailed(a, typ, state, step, opts, err)...)
		}
		if err := appendEvents(a, history.StepCompensatedData{Position: pos, Name: step.Name}); err != nil {
			return edge.Events{}, errors.Wrap(err, "record step_compensated")
		}
		state = a.State()
	}
	done := state.Compensation.Done
	if state.Compensation.Reason == history.CompensateFailed && state.Compensation.Cause != nil {
		return a.Encode(durable, history.TaskFailedData{Error: *state.Compensation.Cause, Compensated: done})
	}
	return a.Encode(durable, history.TaskCancelledData{Reason: state.Compensation.Reason, Compensated: done})
}

// appendEvents appends events that carry no payload for a's attempt.
func appendEvents(a *edge.Attempt, ps ...history.Payload) error {
	ev, err := a.Encode(a.DurableContext(), ps...)
	if err != nil {
		return err
	}
	return a.Append(a.DurableContext(), ev)
}

// interrupted says what to do when the lease context ended mid-compensation:
// hand the task back if the worker is stopping (unless the lease was lost),
// else write nothing (the lease is gone).
func interrupted(a *edge.Attempt, ctx context.Context) error {
	select {
	case <-a.Stopping():
		if !errors.Is(context.Cause(ctx), engine.ErrLeaseLost) {
			return engine.ErrReleased
		}
	default:
	}
	return errors.Wrapf(context.Cause(ctx), "compensation of task %s interrupted", a.Task.ID)
}

// runCompensator runs one compensator with an activity context of its own
// (the idempotency key is the step's with "/compensate" appended), under
// the step's StartToClose and HeartbeatTimeout, so a hung compensator
// cannot hold the task forever.
func runCompensator(ctx context.Context, a *edge.Attempt, taskID string, step history.Step, opts *interpreter.StepOptions) error {
	ctx = activity.WithInfo(activity.WithBlobs(ctx, stepBlobs{a.Blobs(), step.Name, step.Position}), activities.Info{
		TaskID: taskID, TaskType: a.Task.Type, Attempt: a.State().Attempt, WorkerID: a.WorkerID(),
		Step: step.Name, Position: step.Position,
		IdempotencyKey: activity.IdempotencyKey(taskID, step.Position, step.Name) + "/compensate",
	})
	_, err := activity.RunStep(ctx, opts.Timeouts, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, opts.Compensate(ctx, step.Output)
	})
	return err
}

// compensatorFailed classifies a compensator's error under its retry
// policy: retry later, or give the task to a person.
func (h *Handler) compensatorFailed(a *edge.Attempt, typ Type, state history.State, step history.Step, opts *interpreter.StepOptions, err error) []history.Payload {
	override := opts.CompensationRetry
	if override == nil {
		override = opts.Retry
	}
	policy := typ.retryFor(override)
	now := engine.Now()
	elapsed := now.Sub(state.Budget.Since)
	info := classifyFailure(failure{
		Err: err, Default: history.Transient, DefaultBy: "default:compensation",
		Attempt: state.Budget.Attempts, Elapsed: elapsed,
		Task: activities.PolicyTask{Type: a.Task.Type, Queue: a.Task.Queue}, Step: activities.PolicyStep{Name: step.Name},
	}, policy.Classifier)
	info.Step, info.Position = step.Name, step.Position
	d := policy.Decide(info, state.Budget.Attempts, elapsed, rand.Float64)
	if d.Retry {
		next := now.Add(d.Delay)
		return []history.Payload{history.AttemptFailedData{Error: info, NextRunAt: &next}}
	}
	return compensationFailed(step.Position, step.Name, info)
}

// compensationFailed ends the task for a person to look at: a compensator
// that cannot succeed is never silently dropped. A requeue resumes
// compensation with this step.
func compensationFailed(pos int, name string, info history.ErrorInfo) []history.Payload {
	return []history.Payload{
		history.CompensationFailedData{Position: pos, Name: name, Error: info},
		history.TaskDeadLetteredData{Reason: fmt.Sprintf("compensation of step %d (%s) failed", pos, name), Error: info},
	}
}

// compensablePositions returns the completed compensable steps (those on
// record ahead of a gap too), latest position first: the order they are
// compensated in.
func compensablePositions(state history.State) []int {
	var out []int
	steps := state.CompletedSteps()
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Compensable {
			out = append(out, steps[i].Position)
		}
	}
	return out
}
