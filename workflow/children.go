package workflow

import (
	"encoding/json"
	"math"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// Definition is a workflow type a workflow can start as its child:
// *sdk.Workflow[In, Out] is one. Its In and Out make [StartChild] typed.
type Definition[In, Out any] interface {
	TypeName() string
	TypeVersion() int
	// ChildDefaults are what a child of the type takes unless its
	// ChildOpts say otherwise.
	ChildDefaults() ChildDefaults
	// Func is the workflow function; StartChild takes only its types.
	Func() func(Context, In) (Out, error)
}

// ChildDefaults are a workflow type's defaults for its tasks started as
// children.
type ChildDefaults struct {
	Queue string // default "default"
	// MaxAttempts is the type's retry budget, which the child's rescues
	// count against too (a step that kills its worker). 0: the default
	// policy's (history.DefaultMaxAttempts), never unlimited.
	MaxAttempts     int
	ScheduleToClose time.Duration // 0: no deadline
	// Budget is the type's own spending budget for each of its tasks
	// (sdk.WorkflowOpts.Budget); nil: none. A child is covered by its
	// parent's budgets as well.
	Budget *history.TaskBudget
}

// ParentClosePolicy says what becomes of a running child when its parent
// ends other than by completing (cancelled, failed, dead-lettered).
type ParentClosePolicy string

// The parent close policies.
const (
	// ParentCloseCancel requests the child's cancellation before the
	// parent's end is recorded (the default): it stops at its next
	// checkpoint and compensates what it did.
	ParentCloseCancel ParentClosePolicy = history.ParentCloseCancel
	// ParentCloseAbandon leaves the child running on its own.
	ParentCloseAbandon ParentClosePolicy = history.ParentCloseAbandon
)

// ChildOpts are a child's options, given to [StartChild]; nil, or the zero
// value, takes every default.
type ChildOpts struct {
	// Queue the child goes to. Default the child type's queue.
	Queue string
	// Priority of the child in its queue (higher first).
	Priority int
	// MaxAttempts overrides the child type's retry budget
	// (ChildDefaults.MaxAttempts); 0 keeps it. At most math.MaxInt32.
	MaxAttempts int
	// Labels of the child task.
	Labels map[string]string
	// FairnessKey shares the child's queue round robin with other keys
	// (a tenant, a user). Default: the parent's key and weight, so a
	// batch's children are served, budgeted (a fairness key's budget) and
	// counted (usage by tenant) as their parent's tenant.
	FairnessKey string
	// OnParentClose is what becomes of the child if the parent ends other
	// than by completing. Default ParentCloseCancel. A parent that
	// completes leaves a child it did not await running.
	OnParentClose ParentClosePolicy
}

// ErrChildFailed marks a [*ChildError].
var ErrChildFailed = interpreter.ErrChildFailed

// ChildError is a child that ended other than completed (failed,
// dead-lettered, cancelled, expired), as its parent sees it: the child's
// status and failure evidence, from the parent's history
// (child_finished). [Child.Result] returns it; a workflow that returns it
// fails permanently, as running it again would find the same outcome.
type ChildError = interpreter.ChildError

// Child is a child workflow started by [StartChild].
type Child[Out any] struct {
	h   interpreter.ChildHandle
	err error // the start's refusal, returned by Result
}

// StartChild starts wf as a child of the running workflow, with input, and
// returns its handle at once. The child is a task of its own (its own
// history, retries and worker), started exactly once: its start is
// written with the parent's child_started in one transaction, under an
// idempotency key derived from the parent and the child's position, so a
// parent that runs again never starts it twice. The start is written at
// the workflow's next step, sleep, receive or child result (or its
// return), together with the other starts made since, up to the workflow
// type's MaxRunningChildren running at once; the rest start as running
// ones finish.
//
// Children are numbered in the order StartChild is called: on replay the
// child at each position must be of the recorded type, or the run ends
// with an error marked [ErrNondeterministic] naming both. Call it from the
// workflow body's goroutine. opts nil takes every default.
func StartChild[In, Out any](ctx Context, wf Definition[In, Out], input In, opts *ChildOpts) *Child[Out] {
	var o ChildOpts
	if opts != nil {
		o = *opts
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return &Child[Out]{err: errors.Wrapf(err, "workflow.StartChild %s: encode input", wf.TypeName())}
	}
	defaults := wf.ChildDefaults()
	queue := o.Queue
	if queue == "" {
		queue = defaults.Queue
	}
	if o.MaxAttempts < 0 || o.MaxAttempts > math.MaxInt32 {
		return &Child[Out]{err: errors.Newf("workflow.StartChild %s: MaxAttempts %d is outside 0..%d", wf.TypeName(), o.MaxAttempts, math.MaxInt32)}
	}
	// The child's budget is recorded with it, as a start of its type on
	// its own records the type's: the rescuer, which runs no user code,
	// counts its crashed attempts against it.
	maxAttempts := o.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = history.AttemptBudget(defaults.MaxAttempts)
	}
	h, err := interpreter.StartChild(ctx, interpreter.ChildRequest{
		TaskType: wf.TypeName(), TypeVersion: wf.TypeVersion(), Input: raw,
		Options: interpreter.ChildOptions{
			Queue: queue, Priority: o.Priority, MaxAttempts: maxAttempts, Labels: o.Labels,
			FairnessKey: o.FairnessKey, OnParentClose: string(o.OnParentClose),
			ScheduleToClose: defaults.ScheduleToClose, Budget: defaults.Budget,
		},
	})
	return &Child[Out]{h: h, err: err}
}

// Result waits for the child and returns its output, or a [*ChildError]
// when it ended other than completed. Waiting is durable: when the child
// has not finished, the attempt ends (child_wait_started) and holds no
// worker slot; the child's end writes child_finished into this task's
// history and makes it due, in the same transaction, and the next attempt
// replays to here and returns the outcome. The error is otherwise that of
// a run that must stop (see [Sleep]), or an output that does not decode
// into Out.
func (c *Child[Out]) Result(ctx Context) (Out, error) {
	var zero Out
	if c.err != nil {
		return zero, c.err
	}
	raw, err := interpreter.ChildResult(ctx, c.h)
	if err != nil {
		return zero, err
	}
	var out Out
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return zero, errors.Wrapf(err, "child %d: decode output", c.h.Position)
		}
	}
	return out, nil
}

// Position is the child's position among the workflow's children.
func (c *Child[Out]) Position() int { return c.h.Position }

// MapChildren starts one child of wf per input and returns their outputs
// in input order: fan-out and fan-in. The children run at once, up to the
// workflow type's MaxRunningChildren, and the workflow waits for all of
// them in one wait (it wakes when the last ends, not at each); the first
// child (in input order) that did not complete is returned as a
// [*ChildError] once all have finished, with the outputs of the others.
// opts, the options of every child, nil takes every default.
func MapChildren[In, Out any](ctx Context, wf Definition[In, Out], inputs []In, opts *ChildOpts) ([]Out, error) {
	children := make([]*Child[Out], len(inputs))
	handles := make([]interpreter.ChildHandle, 0, len(inputs))
	for i, in := range inputs {
		children[i] = StartChild(ctx, wf, in, opts)
		if children[i].err != nil {
			return make([]Out, len(inputs)), children[i].err
		}
		handles = append(handles, children[i].h)
	}
	// One wait for them all: the parent wakes once its last child ends.
	if err := interpreter.AwaitChildren(ctx, handles); err != nil {
		return make([]Out, len(inputs)), err
	}
	outs := make([]Out, len(inputs))
	var first error
	for i, c := range children {
		out, err := c.Result(ctx)
		var ce *ChildError
		if err != nil && !errors.As(err, &ce) {
			return outs, err // the run must stop, or a start was refused
		}
		if err != nil && first == nil {
			first = err
		}
		outs[i] = out
	}
	return outs, first
}
