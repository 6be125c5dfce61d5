package executor

import (
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cockroachdb/errors"
)

// retryFor returns the retry policy for a failure under override (a step's
// policy), else the type's. An override without a classifier keeps the
// type's.
func (t Type) retryFor(override *activities.RetryPolicy) activities.RetryPolicy {
	if override == nil {
		return t.Retry
	}
	policy := *override
	if policy.Classifier == nil {
		policy.Classifier = t.Retry.Classifier
	}
	return policy
}

// classify turns a run's error into evidence, in this order: errors that
// are always permanent (non-determinism, bad input or step options, an
// unstorable output or one over MaxPayloadBytes, the task's deadline); marks set in Go code; the CEL
// policy of the failed step, else of the workflow type; the default, which
// is transient for a step's errors and permanent for the workflow body's
// own (re-running the same code on the same history gives the same error).
func (h *Handler) classify(task *store.Task, typ Type, res interpreter.Result, attempts int, elapsed time.Duration) history.ErrorInfo {
	f := failure{
		Err: res.Err, Default: history.Permanent, DefaultBy: "default:workflow",
		Attempt: attempts, Elapsed: elapsed,
		Task: activities.PolicyTask{Type: task.Type, Queue: task.Queue},
	}
	if res.Step != nil {
		f.Default, f.DefaultBy, f.Step.Name = history.Transient, "default:step", res.Step.Name
	}
	var override *activities.RetryPolicy
	if res.StepOptions != nil {
		override = res.StepOptions.Retry
	}
	policy := typ.retryFor(override).Classifier
	var info history.ErrorInfo
	if kind := alwaysPermanent(res.Err); kind != "" {
		info = activity.Describe(res.Err, history.Permanent)
		info.Class, info.Kind, info.ClassifiedBy = history.Permanent, kind, "rule:"+kind
	} else {
		info = classifyFailure(f, policy)
	}
	if errors.Is(res.Err, interpreter.ErrRecordFailed) && !activity.Marked(info) {
		// The step finished but its result was not saved: run it again.
		info.Class, info.Kind, info.ClassifiedBy = history.Transient, "record_failed", "rule:record_failed"
	}
	if res.Step != nil {
		info.Step, info.Position = res.Step.Name, res.Step.Position
	}
	return info
}

// failure is a failed attempt, or compensator, as classifyFailure sees it.
type failure struct {
	Err error
	// Default is the class when neither a mark nor a policy decides, and
	// DefaultBy what ClassifiedBy then says.
	Default   history.Class
	DefaultBy string
	Attempt   int
	Elapsed   time.Duration
	Task      activities.PolicyTask
	Step      activities.PolicyStep
}

// classifyFailure describes f.Err and decides its class: a mark in Go code
// wins; otherwise policy, if not nil; otherwise f.Default. A policy whose
// evaluation fails classifies the error as permanent, and the evaluation
// error is recorded in the evidence.
func classifyFailure(f failure, policy *activities.Policy) history.ErrorInfo {
	info := activity.Describe(f.Err, f.Default)
	if activity.Marked(info) {
		return info
	}
	info.ClassifiedBy = f.DefaultBy
	if policy == nil {
		return info
	}
	class, err := policy.Classify(activities.PolicyInput{
		Error:   activities.PolicyError{Message: info.Message, Kind: info.Kind, Status: info.Status, Attrs: info.Attrs},
		Attempt: f.Attempt, Elapsed: f.Elapsed, Task: f.Task, Step: f.Step,
	})
	info.Class, info.ClassifiedBy, info.Policy = class, "policy:"+policy.Name(), policy.Expression()
	if err != nil {
		info.PolicyError = activity.Storable(err.Error())
	}
	return info
}

// alwaysPermanent returns the kind of an error no mark or policy may
// retry, or "".
func alwaysPermanent(err error) string {
	switch {
	case errors.Is(err, interpreter.ErrNondeterministic):
		return "nondeterminism"
	case errors.Is(err, interpreter.ErrChildFailed):
		// The child's outcome is in the history: a retry would find it again.
		return "child_failed"
	case errors.Is(err, interpreter.ErrBadInput):
		return "bad_input"
	case errors.Is(err, interpreter.ErrBadStepOpts):
		return "bad_step_options"
	case errors.Is(err, interpreter.ErrUnstorable):
		return "unstorable_output"
	case errors.Is(err, errDeadline):
		return kindDeadline
	case errors.Is(err, errPayloadTooLarge):
		return kindPayloadTooLarge
	}
	return ""
}
