package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
)

var (
	// ErrNondeterministic marks a run whose steps differ from the ones its
	// history recorded.
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
)

// Context is what a workflow body receives. It deliberately does not
// implement context.Context, so a workflow body cannot hand it to I/O: I/O
// belongs in steps, which receive a real context.
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
}

// RunParams is everything [Run] needs from its caller.
type RunParams struct {
	TaskID  string
	Attempt int
	// Steps are the steps recorded so far, by position.
	Steps []history.Step
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
	// Now is the clock Sleep reads. Default time.Now.
	Now func() time.Time
	// CollectOnly runs the workflow over its recorded steps only, to learn
	// their options (compensators): the first step not on record ends the
	// run with [ErrCollected] instead of running.
	CollectOnly bool
}

// Func is a workflow with its input and output in their JSON encodings:
// what [Run] runs. The sdk builds one from a typed function.
type Func func(ctx Context, input json.RawMessage) (json.RawMessage, error)

// Result is how a run ended.
type Result struct {
	// Output is the workflow's encoded result when Err is nil.
	Output json.RawMessage
	// Err ends the attempt: a step's error, the body's own error, a
	// non-determinism error, [ErrStopping], or the attempt context's error.
	Err error
	// Step is the step whose error ended the run, if a step's did, and
	// StepOpts the options it was called with (nil for the defaults).
	Step     *StepInfo
	StepOpts *StepOpts
	// StepUsage is the AI usage that step reported before it failed
	// (see [activities.RecordUsage]), for the caller's attempt_failed.
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
	Visited map[int]*StepOpts
}

// ErrCollected ends a run made with [RunParams.CollectOnly] at the first
// step the history has not recorded.
var ErrCollected = errors.New("cairn/workflow: recorded steps collected")

type runState struct {
	p        RunParams
	next     int   // position of the next Step call
	aborted  error // set once: every later Step returns it
	failed   *StepInfo
	failedOp *StepOpts
	executed int
	pending  history.Payload // executed (a step) or fired (a timer), not yet recorded
	visited  map[int]*StepOpts

	failedUsage []history.Usage // the AI usage the failed step reported
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
	s := &runState{p: p, visited: map[int]*StepOpts{}}
	defer func() {
		if r := recover(); r != nil {
			err := errors.Newf("workflow panicked: %v", r)
			if s.aborted != nil {
				// The body panicked after a step failed or a stop began
				// (e.g. using a zero result): the abort is what ended it.
				err = errors.WithSecondaryError(s.aborted, err)
			}
			res = Result{Err: err, Step: s.failed, StepOpts: s.failedOp, StepUsage: s.failedUsage, Executed: s.executed, Pending: s.pending, Visited: s.visited}
		}
	}()
	out, err := fn(runContext{s}, input)
	res = Result{Step: s.failed, StepOpts: s.failedOp, StepUsage: s.failedUsage, Executed: s.executed, Pending: s.pending, Visited: s.visited}
	switch {
	case s.aborted != nil:
		// A step's failure or a checkpoint stop ends the attempt, whatever
		// the body did with the error.
		res.Err = s.aborted
	case err != nil:
		res.Err = err
	case s.next < len(p.Steps):
		res.Err = nondeterministic(s.next, p.Steps[s.next].Name, "(workflow returned)")
	default:
		res.Output = out
	}
	return res
}

func nondeterministic(position int, recorded, called string) error {
	err := errors.Newf("step %d: history recorded %q, workflow called %q", position, recorded, called)
	err = errors.WithHint(err, "a workflow must call the same steps in the same order on every run; "+
		"keep side effects and anything that varies (time, randomness, I/O) inside steps, "+
		"and register a new workflow version to change the step sequence")
	return errors.Mark(err, ErrNondeterministic)
}

// StepOpts are per-step options. A nil *StepOpts takes every default.
type StepOpts struct {
	// Retry overrides the workflow type's retry policy for this step's
	// failures: its budget, backoff and classification policy.
	Retry *activities.RetryPolicy
	// StartToClose and HeartbeatTimeout bound one run of the step (see
	// [activities.Timeouts]); hitting either is a transient failure.
	StartToClose     time.Duration
	HeartbeatTimeout time.Duration
	// Irreversible: once started, the step runs to completion even when
	// the task's cancel arrives (its context ends only if the lease is lost,
	// the worker stops hard, or the task's deadline passes). The cancel
	// takes effect after it.
	Irreversible bool
	// Compensate undoes the step: it runs, with the step's recorded output,
	// when the task is cancelled or fails permanently after the step
	// completed, or when compensation of the completed task is requested.
	// Compensators run in reverse order of completion, each recorded
	// (step_compensated). Build one with [Compensate].
	Compensate Compensator
	// CompensationRetry is the retry policy of the compensator. Default:
	// Retry, else the workflow type's. The compensator runs under the
	// step's StartToClose and HeartbeatTimeout.
	CompensationRetry *activities.RetryPolicy
}

// Compensator undoes a completed step, given its recorded output (JSON).
// It should be idempotent: a compensator interrupted by a crash runs again.
type Compensator func(ctx context.Context, output json.RawMessage) error

// Compensate adapts a typed compensator: fn receives the step's output
// decoded as Out.
func Compensate[Out any](fn func(ctx context.Context, out Out) error) Compensator {
	return func(ctx context.Context, raw json.RawMessage) error {
		var out Out
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &out); err != nil {
				return activities.Permanent(errors.Wrap(err, "decode the step's output for its compensator"))
			}
		}
		return fn(ctx, out)
	}
}

func (o *StepOpts) validate() error {
	if o == nil {
		return nil
	}
	for _, r := range []*activities.RetryPolicy{o.Retry, o.CompensationRetry} {
		if r == nil {
			continue
		}
		if err := r.Validate(); err != nil {
			return err
		}
	}
	if o.Irreversible && o.timeouts() != (activities.Timeouts{}) {
		return errors.New("an irreversible step runs to completion: it takes no StartToClose or HeartbeatTimeout")
	}
	return o.timeouts().Validate()
}

func (o *StepOpts) timeouts() activities.Timeouts {
	if o == nil {
		return activities.Timeouts{}
	}
	return activities.Timeouts{StartToClose: o.StartToClose, Heartbeat: o.HeartbeatTimeout}
}

// Step runs fn as the step called name at the current position, or, if the
// history already recorded that step, returns its recorded output without
// running fn. fn receives the activity context (see package activities for
// the task id, attempt and idempotency key it carries). How long fn ran, and
// the AI usage it reports with [activities.RecordUsage], are recorded with
// the step.
//
// A step's error ends the attempt: Step returns it, and every later Step
// call in the run returns it too without running anything. The task is then
// retried from this step or fails, as the error's class decides.
func Step[Out any](ctx Context, name string, fn func(context.Context) (Out, error), opts *StepOpts) (Out, error) {
	var zero Out
	s := ctx.run()
	if s.aborted != nil {
		return zero, s.aborted
	}
	pos := s.next
	if pos < len(s.p.Steps) {
		rec := s.p.Steps[pos]
		if rec.Name != name {
			return zero, s.abort(nondeterministic(pos, rec.Name, name), nil)
		}
		s.visited[pos] = opts
		var out Out
		if len(rec.Output) > 0 {
			if err := json.Unmarshal(rec.Output, &out); err != nil {
				err = errors.Wrapf(err, "step %d (%s): decode recorded output", pos, name)
				return zero, s.abort(errors.Mark(err, ErrNondeterministic), nil)
			}
		}
		s.next++
		return out, nil
	}
	if t := s.p.Timer; t != nil && t.Position == pos {
		// The history has the workflow asleep here: a step in its place
		// is a different sequence, not a step to run.
		return zero, s.abort(nondeterministic(pos, "sleep", name), nil)
	}
	if s.p.CollectOnly {
		return zero, s.abort(ErrCollected, nil)
	}
	if err := s.flush(); err != nil {
		return zero, err
	}
	if err := s.checkpoint(); err != nil {
		return zero, err
	}
	info := StepInfo{Position: pos, Name: name, Irreversible: opts != nil && opts.Irreversible}
	if err := opts.validate(); err != nil {
		err = errors.Mark(errors.Wrapf(err, "%s", info), ErrBadStepOpts)
		return zero, s.abort(err, &info)
	}
	stepCtx := s.p.Context
	if s.p.StepContext != nil {
		stepCtx = s.p.StepContext(info)
	}
	usage := activities.NewUsageRecorder()
	stepCtx = activities.WithUsageRecorder(stepCtx, usage)
	started := time.Now()
	out, err := activities.RunStep(stepCtx, opts.timeouts(), func(ctx context.Context) (Out, error) {
		return callStep(ctx, fn)
	})
	ran := time.Since(started)
	s.executed++
	if s.p.StepDone != nil {
		s.p.StepDone(info, err)
	}
	if err != nil {
		s.failedOp, s.failedUsage = opts, usage.Usage()
		return zero, s.abort(err, &info)
	}
	encoded, err := json.Marshal(out)
	if err == nil && HasNULEscape(encoded) {
		err = errors.Mark(errors.New("output contains the character U+0000, which PostgreSQL cannot store in JSON"), ErrUnstorable)
	}
	if err != nil {
		s.failedUsage = usage.Usage() // spent even though the output cannot be kept
		err = errors.Wrapf(err, "step %d (%s): encode output", pos, name)
		return zero, s.abort(err, &info)
	}
	s.pending = history.StepCompletedData{
		Position: pos, Name: name, Output: encoded, Compensable: opts != nil && opts.Compensate != nil,
		DurationMillis: ran.Milliseconds(), Usage: usage.Usage(),
	}
	s.visited[pos] = opts
	s.next++
	return out, nil
}

// flush records the step executed last, if it is not on record yet.
func (s *runState) flush() error {
	if s.pending == nil {
		return nil
	}
	if err := s.p.Record(s.pending); err != nil {
		what := string(s.pending.EventType())
		if step, ok := s.pending.(history.StepCompletedData); ok {
			what = fmt.Sprintf("step %d (%s)", step.Position, step.Name)
		}
		return s.abort(errors.Mark(errors.Wrapf(err, "record %s", what), ErrRecordFailed), nil)
	}
	s.pending = nil
	return nil
}

// checkpoint stops the run before a new step when the worker is stopping or
// the attempt is over.
func (s *runState) checkpoint() error {
	select {
	case <-s.p.Stopping:
		return s.abort(ErrStopping, nil)
	default:
	}
	if err := context.Cause(s.p.Context); err != nil {
		return s.abort(err, nil)
	}
	return nil
}

func (s *runState) abort(err error, step *StepInfo) error {
	if s.aborted == nil {
		s.aborted, s.failed = err, step
	}
	return s.aborted
}

func callStep[Out any](ctx context.Context, fn func(context.Context) (Out, error)) (out Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Newf("step panicked: %v", r)
		}
	}()
	return fn(ctx)
}

// Typed adapts a typed workflow function to a [Func]: it decodes the input
// (an undecodable input is marked [ErrBadInput]) and encodes the output.
func Typed[In, Out any](fn func(Context, In) (Out, error)) Func {
	return func(ctx Context, raw json.RawMessage) (json.RawMessage, error) {
		var in In
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, errors.Mark(errors.Wrap(err, "decode workflow input"), ErrBadInput)
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(out)
		if err == nil && HasNULEscape(encoded) {
			err = errors.Mark(errors.New("output contains the character U+0000, which PostgreSQL cannot store in JSON"), ErrUnstorable)
		}
		if err != nil {
			return nil, errors.Wrap(err, "encode workflow output")
		}
		return encoded, nil
	}
}

// SleepRequest is the error a run ends with when the workflow sleeps on a
// new durable timer: the caller records timer_started, which ends the
// attempt; the task is due again at FireAt.
type SleepRequest struct {
	Position int
	FireAt   time.Time
}

func (r *SleepRequest) Error() string {
	return fmt.Sprintf("sleeping at step %d until %s", r.Position, r.FireAt.Format(time.RFC3339Nano))
}

// Sleep pauses the workflow for d, durably: the first time it is reached,
// the attempt ends (timer_started) and no worker slot is held while the
// timer runs; the task is due again when it fires, and the next attempt
// replays to here, records timer_fired and goes on. A sleep takes a step
// position, named "sleep", like a step. It returns an error only when the
// run must stop (the worker is stopping, the task was cancelled, a step
// failed before).
func Sleep(ctx Context, d time.Duration) error {
	s := ctx.run()
	if s.aborted != nil {
		return s.aborted
	}
	pos := s.next
	if pos < len(s.p.Steps) {
		if rec := s.p.Steps[pos]; rec.Name != history.SleepStepName {
			return s.abort(nondeterministic(pos, rec.Name, history.SleepStepName), nil)
		}
		s.next++
		return nil
	}
	if s.p.CollectOnly {
		return s.abort(ErrCollected, nil)
	}
	if err := s.flush(); err != nil {
		return err
	}
	if err := s.checkpoint(); err != nil {
		return err
	}
	now := time.Now
	if s.p.Now != nil {
		now = s.p.Now
	}
	if t := s.p.Timer; t != nil && t.Position == pos {
		// Woken by the timer. The claim went by the database clock; if
		// this worker's clock is behind, wait out the difference.
		if wait := t.FireAt.Sub(now()); wait > 0 {
			select {
			case <-time.After(wait):
			case <-s.p.Stopping:
				return s.abort(ErrStopping, nil)
			case <-s.p.Context.Done():
				return s.abort(context.Cause(s.p.Context), nil)
			}
		}
		s.pending = history.TimerFiredData{Position: pos}
		s.next++
		return nil
	}
	return s.abort(&SleepRequest{Position: pos, FireAt: now().Add(max(d, 0))}, nil)
}

// String describes a step for logs.
func (i StepInfo) String() string { return fmt.Sprintf("step %d (%s)", i.Position, i.Name) }

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
