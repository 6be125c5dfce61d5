// Package activities is the step author's API: what the code of a step
// (the function given to workflow.Step) calls on the context it receives.
//
//   - [GetInfo]: the task id and type, the attempt, the step's name and
//     position, and an idempotency key stable across attempts;
//   - [Heartbeat], for long steps with a heartbeat timeout;
//   - [PutBlob] and [GetBlob]: large bytes kept with the task, outside its
//     history;
//   - [RecordUsage]: the AI usage a step reports;
//   - marks and details that describe its errors ([Permanent], [Transient],
//     [RetryAfter], [WithKind], [WithStatus], [WithAttrs]);
//   - and, where workflows are defined, [RetryPolicy] (budget, backoff with
//     jitter, a time budget) with CEL classification policies ([NewPolicy],
//     [MustPolicy]).
//
// The worker's side of the activity context (setting it up, running a step
// under its timeouts, turning an error into evidence) is internal
// (internal/activity, whose package comment says where a step runs and who
// calls what). This package imports history, internal/activity and
// internal/celenv (for policies), and nothing else of cairn. It does no I/O.
package activities
