package workflow

import (
	"encoding/json"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// MaxUpdateNameBytes bounds an update's name: 1..MaxUpdateNameBytes
// bytes of printable UTF-8 (spaces allowed, no control characters).
const MaxUpdateNameBytes = history.MaxUpdateNameBytes

// ErrUpdateCall is what a call of this package's functions (Step, Sleep,
// Receive, StartChild, …) made from an update's handler returns: a handler
// changes the workflow's state and returns; the workflow body acts on
// that state. Returned by the handler, it fails the update, not the task.
var ErrUpdateCall = interpreter.ErrUpdateCall

// UpdateOpts are the options of an update handler ([SetUpdate]); nil, or
// the zero value, takes every default.
type UpdateOpts[A any] struct {
	// Validator accepts an update (nil) or rejects it (its error) before
	// it is written: a rejected update leaves no trace in the history and
	// its caller gets the error (sdk.ErrUpdateRejected; HTTP 422). It runs
	// on the workflow's state as of the history's last event, in a replay
	// that runs no step, so it must only read: what it changes is lost.
	// Default: every update whose args decode into A is accepted.
	Validator func(args A) error
}

// SetUpdate registers handler as the handler of updates called name: a
// request from outside (sdk.Client.Update, POST
// /v1/tasks/{id}/updates/{name}, cairn task update) that changes the
// running workflow's state and gets the handler's result back.
//
//	var approver string
//	workflow.SetUpdate(ctx, "reassign", func(ctx workflow.Context, to string) (string, error) {
//		prev := approver
//		approver = to
//		return prev, nil
//	}, &workflow.UpdateOpts[string]{Validator: func(to string) error {
//		if to == "" {
//			return errors.New("reassign to whom?")
//		}
//		return nil
//	}})
//
// An update is first validated (see [UpdateOpts.Validator]: args that do
// not decode into A are rejected too), then recorded (update_accepted),
// and the handler runs in the task's next run, at the first call of this
// package's functions that would wait or run something new (a step, a
// sleep, a receive, a select, a child's start or result) or at the body's
// return;
// a task waiting for a signal, a timer or its children is woken for it
// and waits again. Its result, or its error, is recorded
// (update_completed) and returned to the caller; the task goes on either
// way. On every later run the handler runs again at the same point with
// the same args, so the workflow's state is rebuilt as it was: like the
// body, a handler must be deterministic.
//
// Register handlers at the top of the body, before the first step: an
// update whose name has no handler where the run applies it fails
// (update_not_found). A handler may not call Step, Sleep, Receive,
// StartChild or the other functions of this package (they return
// [ErrUpdateCall]); its panic fails the update. Registering a name again
// replaces its handler. An invalid name (empty, over
// [MaxUpdateNameBytes], not printable) fails the task permanently, as
// invalid step options do, and SetUpdate returns that error (as it
// returns the run's, when it already ended). docs/updates.md walks through
// an example.
func SetUpdate[A, R any](ctx Context, name string, handler func(ctx Context, args A) (R, error), opts *UpdateOpts[A]) error {
	if handler == nil {
		return interpreter.SetUpdate(ctx, name, interpreter.UpdateHandler{})
	}
	var validate func(A) error
	if opts != nil {
		validate = opts.Validator
	}
	return interpreter.SetUpdate(ctx, name, interpreter.UpdateHandler{
		Handler: func(ctx Context, raw json.RawMessage) (json.RawMessage, error) {
			args, err := decodeArgs[A](name, raw)
			if err != nil {
				return nil, err
			}
			out, err := handler(ctx, args)
			if err != nil {
				return nil, err
			}
			encoded, err := json.Marshal(out)
			return encoded, errors.Wrapf(err, "update %q: encode the result", name)
		},
		Validator: func(raw json.RawMessage) error {
			args, err := decodeArgs[A](name, raw)
			if err != nil || validate == nil {
				return err
			}
			return validate(args)
		},
	})
}

// decodeArgs decodes an update's args into A: none is A's zero value.
func decodeArgs[A any](name string, raw json.RawMessage) (A, error) {
	var args A
	if len(raw) == 0 {
		return args, nil
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		var zero A
		return zero, errors.Wrapf(err, "update %q: decode the args", name)
	}
	return args, nil
}
