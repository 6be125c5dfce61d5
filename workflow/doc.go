// Package workflow is the API for writing cairn workflows. A workflow is a
// Go function that takes a [Context] and its input and calls [Step] for
// every piece of work with side effects; the sdk registers it
// (sdk.NewWorkflow) and its workers run it. On every attempt the function
// runs from the top against the task's history: steps already recorded
// return their recorded output without running, new steps run and are
// recorded before the workflow goes on.
//
// A workflow re-runs from the top on every attempt, so its body must be
// deterministic: the same steps, in the same order, with the same names.
// A different sequence is a non-determinism error ([ErrNondeterministic]),
// which ends the task permanently. Side effects belong in steps; durable
// time comes from [Sleep], never the wall clock. To change the steps of a
// workflow while its tasks are in flight, guard the new code with
// [Patched] (docs/versioning.md).
//
// Steps run one after another unless started with [Go] (joined with
// [Future.Get]) or [Map]: those run concurrently, take their positions in
// call order, and are each recorded once. [Select] goes on with the first
// of several signals, children, a timer and futures, and records which. Call the package's functions from
// the workflow body only: from a goroutine of the workflow's own they fail
// the task as non-deterministic.
//
// [StepOpts] bound one run of a step (start-to-close, heartbeat timeout),
// override the workflow type's retry policy for its failures, mark it
// irreversible (a cancel does not interrupt it), and give it a compensator
// ([Compensate]) that undoes it after a cancel or a permanent failure. A
// cancelled task stops at its next checkpoint: before each step.
//
// The package holds the author's API only; the interpreter that runs a
// workflow against its history is internal (internal/interpreter). It
// imports activities (the step author's API) and that interpreter, and
// nothing else of cairn.
package workflow
