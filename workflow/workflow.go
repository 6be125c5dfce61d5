package workflow

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cockroachdb/errors"
)

// ErrNondeterministic marks a run whose steps differ from the ones its
// history recorded: a step renamed, added or removed at a recorded
// position, a recorded output that no longer decodes into the step's type,
// a body that returns before its recorded steps. It ends the task
// permanently; the error names the position and both names.
var ErrNondeterministic = interpreter.ErrNondeterministic

// Context is what a workflow body receives. It has two methods:
//
//	TaskID() string // the id of the task this run belongs to
//	Attempt() int   // the current attempt number, starting at 1
//
// It deliberately does not implement context.Context, so a workflow body
// cannot hand it to I/O: I/O belongs in steps, which receive a real
// context. Only cairn implements it; pass it to [Step] and [Sleep].
type Context = interpreter.Context

// StepOpts are per-step options, given to [Step] and [Go]; nil, or the zero
// value, takes every default.
type StepOpts struct {
	// Retry overrides the workflow type's retry policy for this step's
	// failures: its budget, backoff and classification policy. Its zero
	// fields take activities.DefaultRetryPolicy's (see
	// [activities.RetryPolicy.WithDefaults]).
	Retry *activities.RetryPolicy
	// StartToClose bounds one run of the step; HeartbeatTimeout is how
	// long it may go without calling [activities.Heartbeat] (set it for long
	// steps, such as a large OCR job or a streamed LLM response, so a step
	// that hangs is noticed long before StartToClose). Hitting either is a
	// transient failure (kind [activities.KindStartToCloseTimeout] or
	// [activities.KindHeartbeatTimeout]). Zero means no limit.
	StartToClose     time.Duration
	HeartbeatTimeout time.Duration
	// Irreversible: once started, the step runs to completion even when
	// the task's cancel arrives (its context ends only if the lease is lost,
	// the worker stops hard, or the task's deadline passes). The cancel
	// takes effect after it: the task compensates and ends cancelled, even
	// when this was its last step.
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
	// Spend declares what the step may spend on an AI model: the model it
	// calls and the tokens and dollars it may use (an estimate, or the
	// cap the step holds its call to). Before the step runs the engine
	// reserves it against the budgets and model rate limits that apply;
	// a budget it would exceed stops the step before it starts, and a
	// rate limit makes it wait its turn. What the step reports with
	// [activities.RecordUsage] settles the reservation. Steps without it
	// run ungated; their reported usage still counts against budgets.
	Spend *Spend
}

// Spend is what a step declares it may spend ([StepOpts.Spend]).
type Spend = history.Spend

// stepOptions translates the options a Step was given for the interpreter:
// nil is nil (every default).
func stepOptions(opts *StepOpts) *interpreter.StepOptions {
	if opts == nil {
		return nil
	}
	return opts.options()
}

// options translates o for the interpreter.
func (o StepOpts) options() *interpreter.StepOptions {
	opts := &interpreter.StepOptions{
		Retry:             withDefaults(o.Retry),
		Irreversible:      o.Irreversible,
		Compensate:        o.Compensate,
		CompensationRetry: withDefaults(o.CompensationRetry),
		Spend:             o.Spend,
	}
	opts.Timeouts.StartToClose, opts.Timeouts.Heartbeat = o.StartToClose, o.HeartbeatTimeout
	return opts
}

// withDefaults is r with its zero fields filled; nil stays nil.
func withDefaults(r *activities.RetryPolicy) *activities.RetryPolicy {
	if r == nil {
		return nil
	}
	filled := r.WithDefaults()
	return &filled
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

// Step runs fn as the step called name at the current position, or, if the
// history already recorded that step, returns its recorded output without
// running fn. fn receives the activity context (see package activities for
// the task id, attempt and idempotency key it carries). How long fn ran, and
// the AI usage it reports with [activities.RecordUsage], are recorded with
// the step.
//
// A step's error ends the attempt: Step returns it, and every later Step
// call in the run returns it too without running anything. The task is then
// retried from this step or fails, as the error's class decides. opts nil
// takes every default. Invalid opts (a bad retry policy, negative
// timeouts, timeouts on an irreversible step) fail the task permanently
// when the step would run.
func Step[Out any](ctx Context, name string, fn func(context.Context) (Out, error), opts *StepOpts) (Out, error) {
	return interpreter.Step(ctx, name, fn, stepOptions(opts))
}

// Sleep pauses the workflow for d, durably: the first time it is reached,
// the attempt ends (timer_started) and no worker slot is held while the
// timer runs; the task is due again when it fires, and the next attempt
// replays to here, records timer_fired and goes on. A sleep takes a step
// position, named "sleep", like a step. It returns an error only when the
// run must stop (the worker is stopping, the task was cancelled, a step
// failed before).
func Sleep(ctx Context, d time.Duration) error { return interpreter.Sleep(ctx, d) }

// Future is a step started with [Go], running concurrently with the
// workflow body. Get waits for it.
type Future[Out any] struct{ f *interpreter.Future[Out] }

// Get waits for the future's step to finish and returns its output, or its
// error. A failed step ends the attempt as a failed [Step] does: Get
// returns the error for the workflow to return (or to wait for other
// futures first), and the task is retried from the unfinished steps or
// fails, as the error's class and the step's retry policy decide. Get
// waits for its own step even after another step failed, so what that step
// finishes is recorded and not run again. Call Get from the workflow body,
// like Step.
func (f *Future[Out]) Get(ctx Context) (Out, error) { return f.f.Get(ctx) }

// Go starts fn as the step called name and returns at once, so several
// steps of one attempt run concurrently; join them with [Future.Get]. The
// step takes its position when Go is called (call order, not completion
// order), so a replay maps every step back to its recorded result. Like
// [Step], a step the history recorded is not run again: its future holds
// the recorded output. fn receives the activity context, with the step's
// own position and idempotency key.
//
// Each finished step is recorded as its own step_completed as soon as it
// finishes, whatever the positions before it (a step on record ahead of
// one still running or failed). After a crash or a failed attempt only the
// steps not on record run again. When the body returns, steps still
// running are waited for and recorded if the attempt ends otherwise than
// completed (a step failed, a stop, a wait); when the workflow completes
// they are cancelled and not recorded. [Sleep] waits for the futures
// started before it. Call Go from the workflow body: Step, Sleep or Go called from any
// other goroutine fails the task as non-deterministic. opts nil takes
// every default.
func Go[Out any](ctx Context, name string, fn func(context.Context) (Out, error), opts *StepOpts) *Future[Out] {
	return &Future[Out]{f: interpreter.Go(ctx, name, fn, stepOptions(opts))}
}

// MapOpts are the options of [Map]; nil, or the zero value, takes every
// default.
type MapOpts struct {
	// Concurrency bounds how many items' steps run at once. 0 or less:
	// every item at once.
	Concurrency int
	// Step are the options of each item's step.
	Step StepOpts
}

// Map runs fn over items as concurrent steps (see [Go]), all called name,
// at most opts.Concurrency at a time, and returns their outputs in item
// order. Item i's step takes the i-th position after the steps before Map,
// whatever order the steps finish in.
//
// When an item fails, Map starts no more items, waits for the items already
// running to finish (each bounded by its step's timeouts; a cancel, a lost
// lease or a hard stop end them sooner) so that what they finish is
// recorded, and then returns the first error in item order among the items
// it started. The failed item ends the attempt as a failed Step does (the
// attempt's attempt_failed names the step that failed first in time), and
// the retry runs only the items not on record: the failed ones and those
// never started. opts nil takes every default.
func Map[In, Out any](ctx Context, name string, items []In, fn func(context.Context, In) (Out, error), opts *MapOpts) ([]Out, error) {
	var o MapOpts
	var stepOpts *interpreter.StepOptions
	if opts != nil {
		o = *opts
		stepOpts = o.Step.options()
	}
	limit := o.Concurrency
	if limit <= 0 || limit > len(items) {
		limit = len(items)
	}
	futures := make([]*Future[Out], 0, len(items))
	for i, item := range items {
		if i >= limit {
			// Waiting for the item limit places before keeps at most limit
			// running; which one to wait for never changes a position.
			if _, err := futures[i-limit].Get(ctx); err != nil {
				break // start no more; the started ones are joined below
			}
		}
		futures = append(futures, &Future[Out]{f: interpreter.Go(ctx, name, func(ctx context.Context) (Out, error) { return fn(ctx, item) }, stepOpts)})
	}
	outs := make([]Out, len(items))
	var first error
	for i, f := range futures {
		out, err := f.Get(ctx) // every started item, so what it finishes is recorded
		if err != nil && first == nil {
			first = err
		}
		outs[i] = out
	}
	if first != nil {
		return nil, first
	}
	return outs, nil
}
