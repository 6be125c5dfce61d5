package workflow

import (
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// SelectCase is one case of [Select], made by [OnSignal], [OnChild],
// [OnTimer] or [OnFuture]. Its function, if not nil, runs when the case
// wins, on the workflow body's goroutine, before Select returns: it may
// call the workflow's API (a step, a receive) as the body would.
type SelectCase struct {
	c   interpreter.SelectCase
	err error // a child case whose start was refused: Select returns it
	won func(ctx Context, sel interpreter.Selected) error
}

// MaxSelectCases bounds the cases of one [Select].
const MaxSelectCases = history.MaxSelectCases

// OnSignal is the case of the next signal called name, its payload decoded
// into T and given to fn. The case takes the signal only when it wins: a
// signal case that loses leaves its signal for a later [Receive] or
// Select of the name.
func OnSignal[T any](name string, fn func(T)) SelectCase {
	return SelectCase{
		c: interpreter.SelectCase{Kind: history.SelectSignal, Signal: name},
		won: func(_ Context, sel interpreter.Selected) error {
			var v T
			if len(sel.Signal.Payload) > 0 {
				if err := json.Unmarshal(sel.Signal.Payload, &v); err != nil {
					return errors.Wrapf(err, "select: decode signal %q (event %d)", name, sel.Signal.Seq)
				}
			}
			if fn != nil {
				fn(v)
			}
			return nil
		},
	}
}

// OnChild is the case of child c's end: fn gets what [Child.Result]
// returns, its output or a [*ChildError].
func OnChild[Out any](c *Child[Out], fn func(Out, error)) SelectCase {
	return SelectCase{
		c:   interpreter.SelectCase{Kind: history.SelectChild, Child: c.h},
		err: c.err,
		won: func(ctx Context, _ interpreter.Selected) error {
			out, err := c.Result(ctx)
			if fn != nil {
				fn(out, err)
			}
			return nil
		},
	}
}

// OnTimer is the case of a durable timer of d, counted from the select's
// first wait; d of 0 or less is due at once (it wins unless something
// else is ready). Of several timer cases only the earliest can win.
func OnTimer(d time.Duration, fn func()) SelectCase {
	return SelectCase{
		c: interpreter.SelectCase{Kind: history.SelectTimer, Timer: d},
		won: func(Context, interpreter.Selected) error {
			if fn != nil {
				fn()
			}
			return nil
		},
	}
}

// OnFuture is the case of future f's step finishing: fn gets what
// [Future.Get] returns.
func OnFuture[Out any](f *Future[Out], fn func(Out, error)) SelectCase {
	return SelectCase{
		c: interpreter.SelectCase{Kind: history.SelectFuture, Future: f.f},
		won: func(ctx Context, _ interpreter.Selected) error {
			out, err := f.Get(ctx)
			if fn != nil {
				fn(out, err)
			}
			return nil
		},
	}
}

// Select waits until one of cases is ready, runs that case's function and
// returns its index: the first of signals, children, a timer and futures
// to be ready wins. The decision is recorded (select_matched) when it is
// made, and every later run of the task takes the recorded case, whatever
// else has arrived by then.
//
// When several cases are ready as Select looks, the one whose event came
// first in the history wins (a signal's signal_received, a child's
// child_finished); a future that finished comes after those, and a timer
// that is due last, as a [Receive] takes a signal that came before its
// timeout. Equal ones go by case order.
//
// When none is ready, Select waits within the attempt for a future among
// the cases to finish; with none, the attempt ends (wait_started) and no
// worker slot is held: the task is due again when a signal of one of the
// names arrives, one of the children finishes, or the earliest timer
// fires, and the next attempt replays to here and decides. A timer that
// loses leaves nothing behind to fire.
//
// A select takes the next position among the workflow's receives: on
// replay the select at a recorded position must have the recorded case
// (same index, kind and signal, child or step), or the run ends with an
// error marked [ErrNondeterministic]. Between 1 and [MaxSelectCases]
// cases, each signal case with a name, each child started by this run,
// or the task fails permanently. The error is otherwise that of a run that
// must stop (see [Sleep]), a child's refused start, or a signal payload
// that does not decode into its case's type (the index is then the
// case's: the signal is taken). The index is -1 with any other error.
func Select(ctx Context, cases ...SelectCase) (int, error) {
	in := make([]interpreter.SelectCase, len(cases))
	for i, c := range cases {
		if c.err != nil {
			return -1, c.err
		}
		in[i] = c.c
	}
	sel, err := interpreter.Select(ctx, in)
	if err != nil {
		return -1, err
	}
	if won := cases[sel.Index].won; won != nil {
		if err := won(ctx, sel); err != nil {
			return sel.Index, err
		}
	}
	return sel.Index, nil
}
