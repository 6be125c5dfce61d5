package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

var (
	// ErrNondeterministic marks a run whose steps differ from the ones its
	// history recorded. Package workflow re-exports it.
	ErrNondeterministic = errors.New("nondeterministic workflow")
	// ErrStopping is returned by a run that stopped at a checkpoint because
	// the worker is shutting down; the task is handed back, not failed.
	ErrStopping = errors.New("stopped at checkpoint: worker shutting down")
	// ErrRecordFailed marks a run that stopped because a completed step
	// could not be recorded (the database was unreachable, or the lease was
	// lost). The step will run again on a later attempt.
	ErrRecordFailed = errors.New("cairn/workflow: recording a step failed")
	// ErrUnstorable marks an output that can be encoded but not stored
	// (PostgreSQL's jsonb refuses U+0000). It is permanent: running the step
	// again would produce it again.
	ErrUnstorable = errors.New("cairn/workflow: output cannot be stored")
	// ErrBadInput marks a task input that cannot be decoded into the
	// workflow's input type. It is permanent: no retry will fix it.
	ErrBadInput = errors.New("bad input")
	// ErrBadStepOpts marks a step called with invalid options. It is
	// permanent: the code would call it the same way again.
	ErrBadStepOpts = errors.New("cairn/workflow: bad step options")
	// ErrCollected ends a run made with [RunParams.CollectOnly] at the first
	// step the history has not recorded.
	ErrCollected = errors.New("cairn/workflow: recorded steps collected")
)

// Context is what a workflow body receives; package workflow re-exports it
// as workflow.Context, where its documentation for authors lives. It
// deliberately does not implement context.Context, so a workflow body
// cannot hand it to I/O: I/O belongs in steps, which receive a real
// context. Only this package implements it (the unexported method), so
// [Step] and [Sleep] always find the run they belong to.
type Context interface {
	// TaskID is the id of the task this run belongs to.
	TaskID() string
	// Attempt is the current attempt number, starting at 1.
	Attempt() int

	run() *runState
}

// StepInfo identifies a step about to run.
type StepInfo struct {
	Position int
	Name     string
	// Irreversible is set for a step that must run to completion once
	// started: its context should not end when the task's cancel arrives.
	Irreversible bool
	// Future is set for a step run by workflow.Go: it runs beside the
	// body, which may return (and so end the run) before it is gated.
	Future bool
}

// String describes a step for logs.
func (i StepInfo) String() string { return fmt.Sprintf("step %d (%s)", i.Position, i.Name) }

// RunParams is everything [Run] needs from its caller.
type RunParams struct {
	TaskID  string
	Attempt int
	// Steps are the steps recorded so far, by position, up to the first
	// position not on record; Ahead those recorded beyond it
	// (history.State's), by position. A step on record at either is not
	// run again.
	Steps []history.Step
	Ahead []history.Step
	// Context is the attempt's context. A run stops at its next checkpoint
	// once it is done.
	Context context.Context
	// Stopping, when closed, makes the run stop at its next checkpoint
	// with [ErrStopping].
	Stopping <-chan struct{}
	// StepDone, when set, is called after each step this run executes,
	// with the step's error (nil when it completed): the end of what
	// StepContext began (a tracing span, say).
	StepDone func(StepInfo, error)
	// StepContext returns the context a new step runs with. Optional:
	// default Context.
	StepContext func(StepInfo) context.Context
	// Record persists a completed step. Run calls it before the next step
	// begins (and before stopping at a checkpoint), so a step is always on
	// record before anything after it runs. The last step a run executes is
	// not recorded by Run: it comes back in [Result.Pending], for the caller
	// to write together with the attempt's outcome in one append. Required.
	Record func(history.Payload) error
	// Timer is the durable timer the task sleeps on, if any (from its
	// state): the Sleep at its position fires it once it is due.
	Timer *history.Timer
	// Mailbox returns the task's signals and waits as the attempt knows
	// them when a Receive is called (a signal appended while the attempt
	// runs joins its state when a record is rebased onto it). Optional:
	// none.
	Mailbox func() Mailbox
	// Children returns the task's children as the attempt knows them
	// (history.State.Children) when a child's result is asked for: a
	// child's end appended while the attempt runs joins its state when a
	// record is rebased onto it. Optional: none.
	Children func() []history.Child
	// StartChildren writes the starts of children (the parent's
	// child_started and the children's tasks, together), in position
	// order; after it returns, Children includes them. Required for a
	// workflow that starts children.
	StartChildren func([]ChildRequest) error
	// MaxRunningChildren caps how many of the task's children run at
	// once; 0 is DefaultMaxRunningChildren.
	MaxRunningChildren int
	// AwaitChildEnds waits, within the attempt and for a bounded time,
	// until count of the children at positions have finished, bringing
	// them into what Children returns, and reports whether they did. A
	// run whose starts the cap holds back calls it before it ends to
	// wait, and on true starts more in the same attempt. Optional: a run
	// without it ends to wait at once.
	AwaitChildEnds func(positions []int, count int) bool
	// Stream writes a chunk (JSON) the workflow body streams to the
	// stream name ([Progress]), at the run's frontier only. Optional:
	// none is written.
	Stream func(name string, data json.RawMessage) error
	// Now is the clock Sleep reads. Default time.Now.
	Now func() time.Time
	// inspected, when set, is where Run leaves the run's state, for
	// [Inspect].
	inspected **runState
	// CollectOnly runs the workflow over its recorded steps only, to learn
	// their options (compensators): the first step not on record ends the
	// run with [ErrCollected] instead of running. Such a run records no
	// patch marker (see [Patched]).
	CollectOnly bool
	// Patches are the patch markers the history recorded
	// (history.State.Patches): a [Patched] call of one of their ids takes
	// the patched branch.
	Patches []history.Patch
	// Strict, with CollectOnly, makes the run a replay (see [Replay]):
	// the workflow may do nothing the history has not recorded (a new
	// step, sleep, waiting receive or child) while the history records a
	// receive that waited or a child it has not reached yet; such a call
	// ends the run as non-deterministic. The runtime does not need it (it
	// never stops at such a point), a replay of an in-flight task does.
	Strict bool
	// Gate, when set, is asked before each new step runs (on the step's
	// goroutine, with its context, after its options are validated),
	// with the spend the step declares (nil: none). It may wait (a model
	// rate limit) or refuse (a budget): its error ends the run as the
	// step's own failure would, before the step ran. When it lets the
	// step run it may return settle, which is then called once the step
	// has run, with the usage the step reported and the step's error,
	// before the step's completion is recorded; settle's error ends the
	// run as a failed record does (the step runs again). An error marked
	// [ErrFutureOnly] for a step of a future fails that future alone (its
	// Get returns it): the run ends with it only if the body returns it.
	// Compensators are not gated. Optional: every step runs.
	Gate func(ctx context.Context, step StepInfo, spend *history.Spend) (settle func(usage []history.Usage, stepErr error) error, err error)
	// Remote are the task's remote steps dispatched and not completed
	// (history.State.Remote), by position: in flight (a call there
	// awaits it), failed (a call there ends the run with the failure, for
	// the step's retry policy), or to retry (a call there dispatches the
	// next attempt).
	Remote []history.RemoteStep
	// DispatchRemote writes remote steps' dispatches (the task's
	// remote_step_dispatched and their rows), in position order. Required
	// for a workflow that calls remote steps.
	DispatchRemote func([]history.RemoteStepDispatchedData) error
	// Updates returns the task's updates as the attempt knows them
	// (history.State.Updates) at each yield (see update.go): those
	// completed run again where they ran, the others run at the run's
	// frontier and are recorded (update_completed, through Record).
	// Optional: none.
	Updates func() []history.Update
}

// Func is a workflow with its input and output in their JSON encodings:
// what [Run] runs. [Typed] builds one from a typed function.
type Func func(ctx Context, input json.RawMessage) (json.RawMessage, error)

// Result is how a run ended.
type Result struct {
	// Output is the workflow's encoded result when Err is nil.
	Output json.RawMessage
	// Err ends the attempt: a step's error, the body's own error, a
	// non-determinism error, [ErrStopping], a [*SleepRequest], or the
	// attempt context's error.
	Err error
	// Step is the step whose error ended the run, if a step's did, and
	// StepOptions the options it was called with (nil for the defaults).
	Step        *StepInfo
	StepOptions *StepOptions
	// StepUsage is the AI usage that step reported before it failed
	// (see activities.RecordUsage), for the caller's attempt_failed.
	StepUsage []history.Usage
	// Executed counts the steps this run executed (not replayed).
	Executed int
	// Pending is the completion of the last executed step when Run did not
	// record it (see [RunParams.Record]): the caller must write it before,
	// or with, the attempt's outcome.
	Pending history.Payload // step_completed or timer_fired
	// Visited are the options of the recorded steps the run passed, by
	// position (nil where a step had none): where compensation finds a
	// step's compensator.
	Visited map[int]*StepOptions
	// Continue is set, with Err nil and no Output, when the body returned
	// a [*ContinueAsNewRequest]: the run ends, a new one goes on.
	Continue *ContinueAsNewRequest
	// Collected describes the call that ended a collect-only run with
	// [ErrCollected] (`step 3 "charge"`, `sleep at step 3`, …): the first
	// thing the workflow would do that the history has not recorded.
	Collected string
}

// runState is one run's progress. The workflow body's goroutine drives it;
// futures' goroutines (see future.go) complete into it, and a misused
// goroutine may call into it, so mu guards every field below p.
type runState struct {
	mu       sync.Mutex
	p        RunParams
	next     int   // position of the next Step call
	aborted  error // set once: every later Step returns it
	failed   *StepInfo
	failedOp *StepOptions
	executed int
	pending  history.Payload // executed (a step) or fired (a timer), not yet recorded
	visited  map[int]*StepOptions
	recv     receiveState
	// handlers are what the body registered (Register), by kind, then
	// name; readOnly is set once the run has ended and [Inspect] calls
	// into them: every call of the workflow API is then refused.
	handlers map[string]map[string]any
	readOnly atomic.Bool
	child    childState
	patched  map[string]bool // the run's Patched decisions, by patch id

	failedUsage []history.Usage // the AI usage the failed step reported

	futures futureSet
	upd     updateState
	remote  remoteState

	collected string // what a collect-only run was called to do at its end, for a replay's report
}

type runContext struct{ s *runState }

func (c runContext) TaskID() string { return c.s.p.TaskID }
func (c runContext) Attempt() int   { return c.s.p.Attempt }
func (c runContext) run() *runState { return c.s }

// Run runs fn against the recorded steps in p. It never panics on a
// workflow's panic: a panic in the body or a step ends the run with an
// error.
func Run(p RunParams, fn Func, input json.RawMessage) (res Result) {
	if p.Context == nil {
		p.Context = context.Background()
	}
	s := &runState{p: p, visited: map[int]*StepOptions{}}
	s.futures.init()
	if p.inspected != nil {
		*p.inspected = s // Inspect reads the handlers once the run ends
	}
	defer func() {
		if r := recover(); r != nil {
			s.endFutures(false)
			s.mu.Lock()
			defer s.mu.Unlock()
			err := errors.Newf("workflow panicked: %v", r)
			if s.aborted != nil {
				// The body panicked after a step failed or a stop began
				// (e.g. using a zero result): the abort is what ended it.
				err = errors.WithSecondaryError(s.aborted, err)
			}
			res = Result{Err: err, Step: s.failed, StepOptions: s.failedOp, StepUsage: s.failedUsage, Executed: s.executed, Pending: s.pending, Visited: s.visited}
		}
	}()
	out, err := runBody(fn, runContext{s}, input)
	cont := continueOf(err)
	if cont != nil {
		// Returned as a workflow returns its output: the run ends well.
		out, err = nil, nil
	}
	if err == nil {
		// From the body's return the run's end is the body's: a future
		// refused or failing while the return is written (its yield, its
		// children) no longer aborts it.
		s.mu.Lock()
		s.futures.returned = true
		s.mu.Unlock()
	}
	if err == nil {
		// The body's return is a yield: updates are applied there too.
		err = s.returnYield()
	}
	if err == nil {
		// Children started and not written yet are the body's too.
		err = s.finishChildren()
	}
	s.mu.Lock()
	succeeded := err == nil && s.aborted == nil
	s.mu.Unlock()
	s.endFutures(succeeded)
	children := s.children() // before s.mu: a record takes recMu, then mu
	unapplied := s.unappliedUpdate()
	s.mu.Lock()
	defer s.mu.Unlock()
	res = Result{Step: s.failed, StepOptions: s.failedOp, StepUsage: s.failedUsage, Executed: s.executed, Pending: s.pending, Visited: s.visited,
		Collected: s.collected}
	switch {
	case s.aborted != nil:
		// A step's failure or a checkpoint stop ends the attempt, whatever
		// the body did with the error.
		res.Err = s.aborted
	case err != nil:
		res.Err = err
	case s.next < s.recordedEnd():
		rec := s.nextRecorded()
		res.Err = nondeterministic(rec.Position, rec.Name, "(workflow returned)")
	case s.child.next < len(children):
		res.Err = nondeterministicChild(s.child.next, children[s.child.next].TaskType, "(workflow returned)")
	case unapplied != nil:
		res.Err = nondeterministicUpdate(*unapplied, history.UpdatePoint{Call: -1, Step: s.next, Receive: s.recv.next, Child: s.child.next})
	case s.p.Strict && s.unreachedWait() != nil:
		w := s.unreachedWait()
		res.Err = nondeterministicReceive(w.Position, w.Name, "(workflow returned)")
	case s.p.Strict && s.selectFrom(s.recv.next) != nil:
		res.Err = nondeterministicSelect(*s.selectFrom(s.recv.next), "(workflow returned)")
	case cont != nil:
		res.Continue = cont
	default:
		res.Output = out
	}
	return res
}

// NondeterminismError is the detail of an [ErrNondeterministic] error:
// where a run and its history parted, and what each had there. Find it
// with errors.As.
type NondeterminismError struct {
	// Kind is what the history recorded at Position: "step" (a step or a
	// sleep, positions among steps), "receive" (a receive that waited,
	// positions among receives), "select" (a select's decision,
	// positions among receives), "child" (positions among children) or
	// "update" (an update's handler, positions among yields).
	Kind     string
	Position int
	// Recorded is what the history recorded there: a step's name (or
	// "sleep"), the signal a receive waited for, a child's type.
	Recorded string
	// Called is what the workflow called instead, as Recorded names it, or
	// a description in parentheses: "(workflow returned)", or, in a
	// strict replay, the new call (`(step 2 "classify")`).
	Called string
}

func (e *NondeterminismError) Error() string {
	switch e.Kind {
	case "receive":
		return fmt.Sprintf("receive %d: history recorded a receive of signal %q, workflow called a receive of %q", e.Position, e.Recorded, e.Called)
	case "child":
		return fmt.Sprintf("child %d: history recorded a child of type %q, workflow started a child of type %q", e.Position, e.Recorded, e.Called)
	case "select":
		return fmt.Sprintf("select %d: history recorded %s, workflow called %s", e.Position, e.Recorded, e.Called)
	case "update":
		return fmt.Sprintf("yield %d: history recorded %s, workflow was at %s", e.Position, e.Recorded, e.Called)
	}
	return fmt.Sprintf("step %d: history recorded %q, workflow called %q", e.Position, e.Recorded, e.Called)
}

func nondeterministic(position int, recorded, called string) error {
	err := errors.WithStack(&NondeterminismError{Kind: "step", Position: position, Recorded: recorded, Called: called})
	err = errors.WithHint(err, "a workflow must call the same steps in the same order on every run; "+
		"keep side effects and anything that varies (time, randomness, I/O) inside steps, "+
		"and guard a change of the step sequence with workflow.Patched, or register a new workflow version (docs/versioning.md)")
	return errmark.Mark(err, ErrNondeterministic)
}

// errSealed is the error of a payload this worker received still
// encrypted: it has no keys for the task's namespace. Not permanent: a
// worker with the keys, or this one once configured, runs it.
func errSealed(what string) error {
	return activities.Transient(errors.WithHint(errors.Newf("%s is encrypted (cairn_sealed) and this worker cannot open it", what),
		"give the worker the namespace's keys (WorkerConfig.Codec, --keys or CAIRN_KEYS_FILE)"))
}

// errUnreadBlob is the error of a payload kept as a blob that reached the
// workflow unread: its blob could not be read (gone with its task, or the
// database out of reach). Not permanent: the next attempt reads again.
func errUnreadBlob(what string) error {
	return activities.Transient(errors.Newf("%s is kept as a blob ({\"cairn_blob\": …}) that could not be read", what))
}

// Typed adapts a typed workflow function to a [Func]: it decodes the input
// (an undecodable input is marked [ErrBadInput]) and encodes the output.
func Typed[In, Out any](fn func(Context, In) (Out, error)) Func {
	return func(ctx Context, raw json.RawMessage) (json.RawMessage, error) {
		var in In
		if history.MaybeSealed(raw) {
			return nil, errSealed("the workflow's input")
		}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, errmark.Mark(errors.Wrap(err, "decode workflow input"), ErrBadInput)
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(out)
		if err == nil && HasNULEscape(encoded) {
			err = errmark.Mark(errors.New("output contains the character U+0000, which PostgreSQL cannot store in JSON"), ErrUnstorable)
		}
		if err != nil {
			return nil, errors.Wrap(err, "encode workflow output")
		}
		return encoded, nil
	}
}

// HasNULEscape reports whether JSON text contains the escape \u0000, which
// PostgreSQL's jsonb refuses. (A literal backslash followed by "u0000" is
// encoded with an escaped backslash and does not count.)
func HasNULEscape(b []byte) bool {
	for i := 0; i+6 <= len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if string(b[i:i+6]) == `\u0000` {
			return true
		}
		i++ // skip the escaped character, e.g. the second of "\\"
	}
	return false
}
