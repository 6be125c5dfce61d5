// Package interpreter runs a workflow function against a task's history: it
// is what package workflow's [Context], [Step] and [Sleep] are made of, and
// what cairn's attempt executor (sdk/internal/executor) calls to run an
// attempt. Steps already recorded return their recorded output without
// running; a new step runs through the activity runtime and is recorded
// before anything after it begins (futures, [Go], run concurrently and are
// recorded as each finishes: see future.go); a step at a recorded position
// with another name is a non-determinism error ([ErrNondeterministic]), as
// is a call from a goroutine other than the body's.
//
// [Run] reports how a run ended ([Result]): the output, or the error that
// ended the attempt, the step it came from and that step's options, the
// completion still to be written, and the options of the recorded steps it
// passed (where compensation finds compensators). The errors it marks
// ([ErrStopping], [ErrRecordFailed], [ErrUnstorable], [ErrBadInput],
// [ErrBadStepOpts], [ErrNondeterministic]) are how the executor classifies
// a failed attempt; workflow authors see only ErrNondeterministic, which
// package workflow re-exports.
//
// The package is internal so that workflow exports only the author's API.
// It imports history, activities and internal/activity (RunStep, the usage
// recorder) and nothing else of cairn; workflow and the sdk (its executor
// and its registration) import it. It does no I/O of its own: the caller
// supplies how a step's context is made and how a completed step is
// recorded.
package interpreter
