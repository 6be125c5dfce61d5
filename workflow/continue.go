package workflow

import "github.com/cairnflow/cairn/internal/interpreter"

// ContinueAsNew returns the error that, returned by a workflow body, ends
// this run and continues the workflow as a new run of the same type and
// version, with input as its input and a history of its own (Temporal's
// NewContinueAsNewError). A loop that would outgrow its history (an
// agent's turns, a poller, a subscription's renewals: a history is
// bounded by the worker's MaxHistoryEvents) carries its state into the
// next run instead:
//
//	if n%1000 == 999 {
//		return 0, workflow.ContinueAsNew(ctx, state)
//	}
//
// Return it as it is (wrapping it with %w is fine); a run ends with it
// only when the body returns it. input must encode as JSON no larger than
// the worker's MaxPayloadBytes (a start input's bound), or the run fails
// permanently.
//
// The run ends continued (status continued, event task_continued naming
// the next run) and the next run's task_scheduled names it
// (continued_from), in one transaction. The next run keeps the task's
// queue, priority, labels, trace id, fairness key and weight, retry
// budget, schedule-to-close deadline and parent; its id is new, and
// Client.Result, Wait and Cancel on any earlier id follow the chain to the
// current run. A child that continues reports to its parent when the last
// run of its chain ends. A cancel requested before the run ends wins: the
// run compensates and ends cancelled, and no next run starts. Children
// still running are closed by their OnParentClose policy, as when a parent
// ends otherwise than completing. See docs/continue-as-new.md.
func ContinueAsNew(ctx Context, input any) error { return interpreter.ContinueAsNew(ctx, input) }

// ErrBadContinueInput marks a [ContinueAsNew] whose input does not encode
// as JSON PostgreSQL can store. It ends the task permanently.
var ErrBadContinueInput = interpreter.ErrBadContinueInput
