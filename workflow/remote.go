package workflow

import (
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// RemoteOpts are a remote step's options, given to [Remote], [GoRemote]
// and [MapRemote]; nil, or the zero value, takes every default.
type RemoteOpts struct {
	// Queue is the queue of remote workers the step goes to: a worker
	// claims steps of the queues it serves (and its token allows).
	// Default "default".
	Queue string
	// HeartbeatTimeout is how long a worker may hold the step without a
	// heartbeat: its claim's lease. A worker that dies, hangs or loses the
	// network loses the step this long after its last heartbeat, and the
	// attempt fails (kind heartbeat_timeout, transient unless the retry
	// policy says otherwise). 1s to 1h; default 30s.
	HeartbeatTimeout time.Duration
	// StartToClose, when set, is how long one run of the step may take:
	// the worker is told, and a worker past it should fail the step.
	StartToClose time.Duration
	// Retry overrides the workflow type's retry policy for the step's
	// failures, as [StepOpts.Retry] does: its classifier (a CEL policy)
	// classifies a remote worker's errors as it would a Go step's, from
	// the kind, status, attributes and message the worker reported.
	Retry *activities.RetryPolicy
	// Compensate undoes the step, in this workflow's worker, given the
	// output the remote worker returned (see [StepOpts.Compensate]).
	Compensate Compensator
	// CompensationRetry is the compensator's retry policy. Default: Retry,
	// else the workflow type's.
	CompensationRetry *activities.RetryPolicy
}

// options translates o for the interpreter.
func (o *RemoteOpts) options() interpreter.RemoteOptions {
	if o == nil {
		return interpreter.RemoteOptions{}
	}
	return interpreter.RemoteOptions{
		Queue: o.Queue, HeartbeatTimeout: o.HeartbeatTimeout, StartToClose: o.StartToClose,
		Step: &interpreter.StepOptions{
			Retry: withDefaults(o.Retry), Compensate: o.Compensate, CompensationRetry: withDefaults(o.CompensationRetry),
		},
	}
}

// RemoteFuture is a remote step started with [GoRemote]. Get waits for it.
type RemoteFuture[Out any] struct {
	f   *interpreter.RemoteFuture
	err error // the call's refusal, returned by Get
}

// GoRemote hands the step called name, with input, to a worker of
// opts.Queue, in any language (the remote step protocol:
// docs/remote-steps.md), and returns at once. The step takes its
// position when GoRemote is called, as a [Go] step does, and is recorded
// in the history like any step: its dispatch with its input
// (remote_step_dispatched), the worker's output (remote_step_completed)
// or its error (remote_step_failed), each attempt. The workflow holds no
// worker slot while the step runs: awaiting it ends the attempt
// (remote_wait_started), and its outcome wakes the task. A failure is
// classified and retried by opts.Retry (else the workflow type's
// policy) exactly as a Go step's error is, and a retry dispatches the
// step again. Like [Step], a step the history recorded is not
// dispatched again. The dispatch is written at the workflow's next step,
// wait or await: a remote step the workflow never awaits and that is
// still unwritten when it completes is not dispatched, as a [Go] step
// still running then is cancelled. Call it from the workflow body. opts
// nil takes every default.
func GoRemote[Out any](ctx Context, name string, input any, opts *RemoteOpts) *RemoteFuture[Out] {
	o := opts.options()
	if err := validRemote(name, o); err != nil {
		return &RemoteFuture[Out]{err: err}
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return &RemoteFuture[Out]{err: errors.Wrapf(err, "workflow.Remote %s: encode input", name)}
	}
	return &RemoteFuture[Out]{f: interpreter.Remote(ctx, name, raw, o)}
}

// Get waits for the remote step and returns its output, decoded into
// Out, or its error. Waiting is durable: when the step has not finished,
// the attempt ends and the next one replays to here. A failed step ends
// the attempt as a failed [Step] does.
func (f *RemoteFuture[Out]) Get(ctx Context) (Out, error) {
	var zero Out
	if f.err != nil {
		return zero, f.err
	}
	raw, err := interpreter.RemoteResult(ctx, f.f)
	if err != nil {
		return zero, err
	}
	return decodeRemote[Out](f.f, raw)
}

func decodeRemote[Out any](f *interpreter.RemoteFuture, raw json.RawMessage) (Out, error) {
	var out Out
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return out, errors.Wrapf(err, "remote step %d: decode output", f.Position)
		}
	}
	return out, nil
}

// Remote runs the step called name on a remote worker and returns its
// output: [GoRemote] and [RemoteFuture.Get] in one call.
func Remote[Out any](ctx Context, name string, input any, opts *RemoteOpts) (Out, error) {
	return GoRemote[Out](ctx, name, input, opts).Get(ctx)
}

// MapRemote hands one step called name per input to remote workers, all
// at once, and returns their outputs in input order: a fan-out to
// workers of any language, and its fan-in. The workflow waits for all
// of them in one wait (it wakes when the last completes, or at once when
// one fails); a failed item ends the attempt as a failed [Map] item
// does, and the retry dispatches only the items not on record.
func MapRemote[In, Out any](ctx Context, name string, inputs []In, opts *RemoteOpts) ([]Out, error) {
	futures := make([]*RemoteFuture[Out], len(inputs))
	handles := make([]*interpreter.RemoteFuture, 0, len(inputs))
	for i, in := range inputs {
		futures[i] = GoRemote[Out](ctx, name, in, opts)
		if futures[i].err != nil {
			return nil, futures[i].err
		}
		handles = append(handles, futures[i].f)
	}
	if err := interpreter.AwaitRemote(ctx, handles); err != nil {
		return nil, err
	}
	outs := make([]Out, len(inputs))
	for i, f := range futures {
		out, err := f.Get(ctx)
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}
	return outs, nil
}

// validRemote checks a remote step's name and options before the step
// is called: a bad one fails the task permanently, as bad step options do.
func validRemote(name string, o interpreter.RemoteOptions) error {
	bad := func(format string, args ...any) error {
		return errmark.Mark(errors.Newf("workflow.Remote %q: "+format, append([]any{name}, args...)...), interpreter.ErrBadStepOpts)
	}
	switch {
	case !validRemoteName(name):
		return bad("a remote step's name is 1 to 200 letters, digits and \"._:-\", starting with a letter or digit")
	case o.Queue != "" && !validRemoteName(o.Queue):
		return bad("queue %q: 1 to 200 letters, digits and \"._:-\", starting with a letter or digit", o.Queue)
	case o.HeartbeatTimeout != 0 && (o.HeartbeatTimeout < time.Second || o.HeartbeatTimeout > time.Hour):
		return bad("HeartbeatTimeout %s is outside 1s..1h", o.HeartbeatTimeout)
	case o.StartToClose < 0:
		return bad("StartToClose %s is negative", o.StartToClose)
	}
	return nil
}

// validRemoteName is the rule of durable names (sdk.NamePattern).
func validRemoteName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == ':' || r == '-')
		if !ok {
			return false
		}
	}
	return true
}
