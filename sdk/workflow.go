package sdk

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
)

// WorkflowRef names a workflow type at a version: what [Client.StartDynamic]
// needs. *[Workflow] implements it, and so does [TypeRef] for callers that
// know only the name.
type WorkflowRef interface {
	TypeName() string
	TypeVersion() int
}

// TypeRef is a [WorkflowRef] by name and version, for starting a workflow
// the caller has no Go value of (the CLI, another service).
type TypeRef struct {
	Name    string
	Version int
}

// TypeName implements [WorkflowRef].
func (r TypeRef) TypeName() string { return r.Name }

// TypeVersion implements [WorkflowRef].
func (r TypeRef) TypeVersion() int { return r.Version }

// WorkflowOpts are a workflow type's defaults, given to [NewWorkflow]; nil,
// or the zero value, takes every default.
type WorkflowOpts struct {
	// Queue tasks of this type go to unless started with another. Default
	// "default".
	Queue string
	// Retry is the retry policy: budget, backoff, and the CEL policy that
	// classifies errors (see activities.NewPolicy). Steps may override it
	// (workflow.StepOpts.Retry). Default activities.DefaultRetryPolicy; a
	// policy's zero fields take its values (RetryPolicy.WithDefaults).
	Retry *activities.RetryPolicy
	// ScheduleToClose, when set, is a deadline for each task of this type,
	// counted from its start: a task not finished by then is not started
	// or retried again but dead-lettered, and a running attempt's context
	// ends at it. StartOpts.Deadline overrides it per task.
	ScheduleToClose time.Duration
	// SkipDeadLetter ends tasks that fail permanently or use up their
	// retry budget as failed (task_failed) instead of dead-lettered
	// (task_dead_lettered): for work nobody would retry by hand.
	SkipDeadLetter bool
	// MaxRunningChildren caps how many of a task's child workflows
	// (workflow.StartChild) run at once; the rest start as running ones
	// finish. Default 100.
	MaxRunningChildren int
	// Signals, when not nil, declares the signals tasks of this type
	// receive and what each payload must be ([DeclareSignal],
	// [DeclareApproval]): workers record them with the type, and a
	// signal of another name, or whose payload does not fit, is refused
	// when sent ([Client.Signal], the HTTP API, the CLI, callback links)
	// and nothing is written. Each version declares its own; a task is
	// checked against its version's. Nil: any signal is taken; empty but
	// not nil: none is. At most [MaxDeclaredSignals].
	Signals []SignalDecl
	// Budget, when set, is each task's budget unless its start gives
	// another (StartOpts.Budget): what a task of this type and its
	// descendants may spend on AI models over their lives. Its Window
	// must be 0. A task of the type started as a child has it as well as
	// its parent's. See [Budget].
	Budget *Budget
}

// Workflow is a registered-able workflow type: a name and version that are
// stored with every task (so never derive them from Go identifiers), and a
// typed function.
type Workflow[In, Out any] struct {
	name     string
	version  int
	fn       func(workflow.Context, In) (Out, error)
	defaults workflowDefaults
}

// workflowDefaults are what a start and a worker take from a workflow type.
type workflowDefaults struct {
	queue           string
	retry           activities.RetryPolicy
	scheduleToClose time.Duration
	skipDeadLetter  bool
	maxChildren     int
	signals         map[string]json.RawMessage // declared signals' schemas; nil: none declared
	budget          *history.TaskBudget        // each task's own budget; nil: none
}

// NewWorkflow defines a workflow type; opts nil takes every default. It
// panics on an invalid definition, as it runs at start-up; see
// [NewWorkflowSafely].
func NewWorkflow[In, Out any](name string, version int, fn func(workflow.Context, In) (Out, error), opts *WorkflowOpts) *Workflow[In, Out] {
	wf, err := NewWorkflowSafely(name, version, fn, opts)
	if err != nil {
		panic(err)
	}
	return wf
}

// NewWorkflowSafely is [NewWorkflow] returning an error instead of
// panicking; its errors are marked [ErrInvalid].
func NewWorkflowSafely[In, Out any](name string, version int, fn func(workflow.Context, In) (Out, error), opts *WorkflowOpts) (*Workflow[In, Out], error) {
	wf, err := newWorkflow(name, version, fn, orZero(opts))
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return wf, nil
}

func newWorkflow[In, Out any](name string, version int, fn func(workflow.Context, In) (Out, error), opts WorkflowOpts) (*Workflow[In, Out], error) {
	if err := validateTypeName(name); err != nil {
		return nil, err
	}
	if version < 1 {
		return nil, errors.Newf("workflow %s: version %d must be at least 1", name, version)
	}
	if fn == nil {
		return nil, errors.Newf("workflow %s: function is nil", name)
	}
	wf := &Workflow[In, Out]{name: name, version: version, fn: fn,
		defaults: workflowDefaults{queue: "default", retry: activities.DefaultRetryPolicy}}
	if opts.Queue != "" {
		if err := validateName("queue", opts.Queue); err != nil {
			return nil, errors.Wrapf(err, "workflow %s", name)
		}
		wf.defaults.queue = opts.Queue
	}
	if opts.Retry != nil {
		retry := opts.Retry.WithDefaults()
		if err := retry.Validate(); err != nil {
			return nil, errors.Wrapf(err, "workflow %s", name)
		}
		wf.defaults.retry = retry
	}
	if opts.ScheduleToClose < 0 {
		return nil, errors.Newf("workflow %s: ScheduleToClose %s is negative", name, opts.ScheduleToClose)
	}
	wf.defaults.scheduleToClose = opts.ScheduleToClose
	wf.defaults.skipDeadLetter = opts.SkipDeadLetter
	if opts.MaxRunningChildren < 0 {
		return nil, errors.Newf("workflow %s: MaxRunningChildren %d is negative", name, opts.MaxRunningChildren)
	}
	wf.defaults.maxChildren = opts.MaxRunningChildren
	signals, err := declaredSignals(opts.Signals)
	if err != nil {
		return nil, errors.Wrapf(err, "workflow %s", name)
	}
	wf.defaults.signals = signals
	if wf.defaults.budget, err = taskBudget(opts.Budget); err != nil {
		return nil, errors.Wrapf(err, "workflow %s", name)
	}
	return wf, nil
}

// TypeName implements [WorkflowRef].
func (w *Workflow[In, Out]) TypeName() string { return w.name }

// TypeVersion implements [WorkflowRef].
func (w *Workflow[In, Out]) TypeVersion() int { return w.version }

func (w *Workflow[In, Out]) typeDefaults() workflowDefaults { return w.defaults }

// ChildDefaults implements [workflow.Definition]: a child of this type
// goes to the type's queue, with its retry budget, under its
// ScheduleToClose, as a task of the type started on its own does.
func (w *Workflow[In, Out]) ChildDefaults() workflow.ChildDefaults {
	return workflow.ChildDefaults{Queue: w.defaults.queue, MaxAttempts: w.defaults.retry.MaxAttempts,
		ScheduleToClose: w.defaults.scheduleToClose, Budget: w.defaults.budget}
}

// Func implements [workflow.Definition]: the workflow function.
func (w *Workflow[In, Out]) Func() func(workflow.Context, In) (Out, error) { return w.fn }

var _ workflow.Definition[int, int] = (*Workflow[int, int])(nil)

// hasDefaults is implemented by *Workflow, whose defaults a start uses.
type hasDefaults interface {
	typeDefaults() workflowDefaults
}

func validateTypeName(name string) error { return validateName("workflow type name", name) }

// NamePattern is what a durable name must match: a workflow type, a
// queue, a schedule or a namespace. 1 to 200 characters; ASCII letters,
// digits and "._:-"; the first a letter or a digit. No '/', '?', '#',
// '%', '@' or spaces: a name is put in URL paths (the console's and the
// API's), in claim keys ('@' separates a type from its version), and in
// logs, and each of those stays one segment, one key, one word.
const NamePattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$`

// ValidateName checks name against [NamePattern]; what says what the name
// is for the error ("queue", "namespace"). The server and the CLI check
// the names they are sent with it.
func ValidateName(what, name string) error { return validateName(what, name) }

// validateName checks a durable name against [NamePattern].
func validateName(what, name string) error {
	if name == "" || len(name) > 200 {
		return errors.Newf("%s %q: must be 1 to 200 characters", what, name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._:-", r)
		if !ok {
			return errors.Newf("%s %q: use letters, digits and \"._:-\", starting with a letter or digit", what, name)
		}
	}
	return nil
}
