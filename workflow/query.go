package workflow

import "github.com/cairnflow/cairn/internal/interpreter"

// MaxQueryNameBytes bounds a query's name: 1..MaxQueryNameBytes bytes of
// printable UTF-8 (spaces allowed, no control characters).
const MaxQueryNameBytes = interpreter.MaxHandlerNameBytes

// ErrReadOnly marks a call of the workflow API (Step, Sleep, Receive, Go,
// …) made from a query handler: the call fails, and the query's answer is
// the handler's error.
var ErrReadOnly = interpreter.ErrReadOnly

// SetQuery registers handler as the query called name: a read-only view
// of the workflow's state that callers outside the task ask for
// (sdk.Client.Query, GET /v1/tasks/{id}/queries/{name}, `cairn task
// query`). Call it from the workflow body, typically at its top, with a
// handler that reads variables of the body:
//
//	stage := "extracting"
//	workflow.SetQuery(ctx, "stage", func(struct{}) (string, error) { return stage, nil })
//
// A query is answered by replay: a worker that registers the task's type
// and version replays its history without running a step, to the task's
// latest event (for a task in flight, the first call the history has not
// recorded; for a finished task, the body's end), then calls the handler
// the body had registered by that point with the caller's arguments,
// decoded into A (absent: A's zero value). Its answer R is encoded as
// JSON. So the handler sees the state as of the task's latest event, and
// a query is answered the same whether a worker holds the task, the task
// waits (on a signal, a timer, children), or it has finished.
//
// The handler must only read: a call it makes into the workflow (Step,
// Sleep, Receive, Go, …) fails with an error marked [ErrReadOnly]. Its
// error is the query's answer failing; it should return quickly (the
// query is bounded in time). Registering a name again replaces the
// handler. An invalid name (empty, over [MaxQueryNameBytes], not
// printable) or a nil handler fails the task permanently, as invalid step
// options do; SetQuery returns that error (and the run's, if it has
// ended). On a run that is not a query's replay, SetQuery only records
// the handler: it costs nothing in the history.
func SetQuery[A, R any](ctx Context, name string, handler func(args A) (R, error)) error {
	return interpreter.SetQuery(ctx, name, interpreter.TypedQuery(handler))
}
