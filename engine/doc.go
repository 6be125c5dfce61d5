// Package engine is cairn's runtime, above the store seam (package
// engine/store) and below the SDK. The runtime lives in rooms under
// engine/internal, one job each, written once over any [store.Store], so
// the PostgreSQL driver (engine/pgstore) and the embedded SQLite driver
// (engine/sqlitestore) get the same behaviour:
//
//   - processor: claims attempts under leases and runs them through a
//     [Handler] with bounded concurrency (processor.go, attempt.go); its
//     claim loop (claimloop.go), lease renewal in batches (heartbeat.go),
//     the group-commit appender that writes outcomes (appender.go), and a
//     running parent's children (children.go);
//   - notifier: relays the store's [store.Listener] to workers and
//     waiters, with polling as the fallback (notifier.go);
//   - leadership: the elector that takes and renews the leader lease
//     (elector.go);
//   - maintenance: one service per job, run by the maintainer
//     (maintainer.go): the lease rescuer in every process (rescuer.go,
//     rescue.go), and, while this process leads, the start-deadline
//     expirer (deadlines.go), cron (cron.go), retention (retention.go) and
//     the archiver (archiver.go);
//   - requests: operator requests on tasks, cancel and compensate
//     (cancel.go), requeue (requeue.go), a parent's close of its children
//     (children.go): read, replay, decide, fenced append; and a running
//     parent's start of children (children.go), over a transaction;
//   - diagnosis: the judgement of a queue's measurements (diagnosis.go);
//   - metrics: the drivers' [store.Observer] and the queue collectors
//     (metrics.go);
//   - archive: archived histories in a bucket, a directory or an
//     S3-compatible bucket's prefix (package internal/bucket) (archive.go,
//     read.go, buckets.go);
//   - plan: what both drivers do alike before they write, imported by
//     them only (plan.go, events.go, aftercommit.go, bound.go, children.go,
//     keys.go, retention.go, series.go, signal.go);
//   - service: what every long-lived part shares: start and stop, the
//     outage log, backoff (service.go, outage.go).
//
// This package is the SDK's door into those rooms, not a user's API:
// Go lets only code under engine/ import engine/internal, and the SDK
// (package sdk and its attempt executor) drives the runtime from outside
// it. runtime.go names what the SDK uses, each an alias of or a call into
// its room; users configure everything through package sdk (metrics,
// placement in cells, archives, retention, the leader's maintenance). Its
// other files are archive locations (archive.go), erasure (erase.go) and
// the clock (clock.go). The runtime sees payloads only as the SDK's
// payload stage (package payload, at sdk/internal/edge) encoded them:
// sealed or kept by reference, it stores and archives them as they are.
//
// Beside the runtime under engine/ are the seam (engine/store), the
// drivers (engine/pgstore, engine/sqlitestore) and the test helpers
// (engine/storetest, the conformance suite; engine/enginetest).
//
// The rooms import engine/store, history and each other, never a driver,
// and reach user code only through the small non-generic [Handler]
// interface, which the SDK's attempt executor implements.
//
// Invariant: every write appends events and updates the task's projection
// row in the same statement, and the row always equals history.Replay of the
// task's events (lease_expires_at aside, which heartbeats extend outside the
// log). Writers state the sequence they expect and, when acting for an
// attempt, the lease epoch they hold; a racing writer gets
// [store.ErrConflict], a stale one [store.ErrFenced].
package engine
