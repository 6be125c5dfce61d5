// Package engine is cairn's runtime, above the store seam (package
// engine/store) and below the SDK. It is written once over any
// [store.Store], so the PostgreSQL driver (engine/pgstore) and the embedded
// SQLite driver (engine/sqlitestore) get the same behaviour:
//
//   - the processor (processor.go): claims attempts under leases and runs
//     them through a [Handler] with bounded concurrency; its claim loop
//     (claimloop.go), lease renewal in batches (heartbeat.go) and the
//     group-commit appender that writes outcomes (appender.go);
//   - the rescuer (leader.go): in every process, rescues expired leases as
//     they expire (rescue.go); one process at a time, by a lease row, ends
//     tasks past their start deadline, fires due schedules and removes
//     finished tasks;
//   - the notifier (notifier.go): relays the store's [store.Listener] to
//     workers and waiters, with polling as the fallback;
//   - requests on tasks (cancel.go, requeue.go) and the queue diagnosis's
//     judgement (diagnose.go): read, replay, decide, fenced append;
//   - metrics (metrics.go) and the clock ([Clock], clock.go).
//
// It imports engine/store, engine/internal/plan and history, never a
// driver. It reaches user code only through the small non-generic [Handler]
// interface, which the SDK's attempt executor implements.
//
// Invariant: every write appends events and updates the task's projection
// row in the same statement, and the row always equals history.Replay of the
// task's events (lease_expires_at aside, which heartbeats extend outside the
// log). Writers state the sequence they expect and, when acting for an
// attempt, the lease epoch they hold; a racing writer gets
// [store.ErrConflict], a stale one [store.ErrFenced].
package engine
