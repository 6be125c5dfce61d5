// Package workflow is cairn's programming model. A workflow is a Go function
// that takes a [Context] and its input and calls [Step] for every piece of
// work with side effects. [Run] runs a workflow function against a task's
// history: steps already recorded return their recorded output without
// running, new steps run and are recorded before the workflow goes on.
//
// A workflow re-runs from the top on every attempt, so its body must be
// deterministic: the same steps, in the same order, with the same names.
// A different sequence is a non-determinism error ([ErrNondeterministic]),
// which ends the task permanently. Side effects belong in steps.
//
// [StepOpts] bound one run of a step (start-to-close, heartbeat timeout),
// override the workflow type's retry policy for its failures, mark it
// irreversible (a cancel does not interrupt it), and give it a compensator
// ([Compensate]) that undoes it after a cancel or a permanent failure. A
// cancelled task stops at its next checkpoint: before each step.
//
// The package imports history and activities (the step runtime) and nothing
// else of cairn. It does no I/O of its own: the caller supplies how a step's
// context is made and how a completed step is recorded.
package workflow
