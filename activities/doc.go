// Package activities is cairn's step runtime: the activity context a step
// runs with (task id, attempt, a per-step idempotency key stable across
// attempts), step timeouts (RunStep, Heartbeat), the marks and details that
// describe errors (Permanent, Transient, RetryAfter, WithKind, WithStatus,
// WithAttrs), CEL classification policies (NewPolicy), and retry policies
// with backoff, jitter and a time budget (RetryPolicy.Decide), and the AI
// usage a step reports (RecordUsage).
//
// It imports history and nothing else of cairn. It does no I/O.
package activities
