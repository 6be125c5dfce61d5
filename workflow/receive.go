package workflow

import (
	"time"

	"github.com/cairnflow/cairn/internal/interpreter"
)

// Receive returns the next signal called name sent to the task (with
// sdk.Client.Signal, the HTTP API or the CLI), its payload decoded into T;
// ok is false when timeout passed with none.
//
// If the history holds a signal of that name no earlier receive took, it
// is returned at once and nothing is written. Otherwise the attempt ends
// (wait_started, with the deadline now+timeout) and no worker slot is held
// while the task waits; it is due again as soon as a signal of the name
// arrives, and the next attempt replays to here and returns it. If the
// deadline passes first, the next attempt records wait_timed_out and
// Receive returns ok false; a signal that arrives after that stays in the
// history for the next Receive of the name.
//
// Receives are numbered in the order the workflow makes them: the Nth
// receive of a name that does not time out takes the Nth signal of that
// name. A receive that waited is recorded, and on replay the receive at
// its position must name the same signal, or the run ends with an error
// marked [ErrNondeterministic] naming both. timeout must be above 0 and
// name not empty, or the task fails permanently. The error is otherwise
// that of a run that must stop (see [Sleep]), or a payload that does not
// decode into T (ok is then true: the signal is taken).
func Receive[T any](ctx Context, name string, timeout time.Duration) (T, bool, error) {
	return interpreter.Receive[T](ctx, name, timeout)
}
