// Package activity is the runtime side of cairn's activity context: what
// the worker puts into the context a step runs with, and how it runs the
// step and reads the errors it returns. Package activities is the step
// author's side of the same context; it reads what this package puts
// there, and a user cannot forge an activity context because the setters
// are here, under the module's internal/.
//
// Where a step runs, and who calls what:
//
//   - the engine's processor claims an attempt and calls the sdk's attempt
//     executor (sdk/internal/executor, an engine.Handler) on a goroutine
//     of its own;
//   - the executor replays the task's history and calls internal/interpreter
//     to run the workflow function, giving it a StepContext that builds
//     each step's context with [WithInfo] and [WithBlobs];
//   - the workflow body calls workflow.Step, which is interpreter.Step: a
//     step already in the history returns its recorded output; a new one
//     runs under [RunStep] (StartToClose and heartbeat timeouts), with a
//     [UsageRecorder] attached by [WithUsageRecorder], and its output is
//     recorded (step_completed) through the executor before the body goes on;
//   - inside the step, the author's code calls package activities:
//     GetInfo, Heartbeat, PutBlob/GetBlob, RecordUsage, and marks its
//     errors (Permanent, Transient, RetryAfter, WithKind, ...);
//   - when the run ends with an error, the executor turns it into evidence
//     ([Describe], [Marked], then the CEL policy of the step or the
//     workflow type) and decides on a retry (activities.RetryPolicy.Decide).
//
// It imports history and nothing else of cairn (but internal/errmark). It
// does no I/O.
package activity
