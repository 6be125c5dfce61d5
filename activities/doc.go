// Package activities is cairn's step runtime: the activity context a step
// runs with (task id, attempt, a per-step idempotency key stable across
// attempts), the Permanent and Transient marks that classify errors, and
// retry policies with exponential backoff and full jitter.
//
// It imports history and nothing else of cairn. It does no I/O.
package activities
