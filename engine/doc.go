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
//   - maintenance: rescues expired leases in every process (rescue.go)
//     and, under the leader lease, ends tasks past their start deadline,
//     fires cron schedules, removes finished tasks (retention.go) after
//     archiving them (archiver.go) (rescuer.go);
//   - requests: operator requests on tasks, cancel and compensate
//     (cancel.go), requeue (requeue.go), a parent's close of its children
//     (children.go): read, replay, decide, fenced append;
//   - diagnosis: the judgement of a queue's measurements (diagnosis.go);
//   - metrics: the drivers' [store.Observer] and the queue collectors
//     (metrics.go);
//   - archive: archived histories in a directory or an S3-compatible
//     bucket (archive.go, read.go, dir.go, s3.go, buckets.go);
//   - plan: what both drivers do alike before they write;
//   - service: what every long-lived part shares: start and stop, the
//     outage log, backoff (service.go, outage.go).
//
// This package is the SDK's door into those rooms, not a user's API:
// Go lets only code under engine/ import engine/internal, and the SDK
// (package sdk and its attempt executor) drives the runtime from outside
// it. runtime.go names what the SDK uses, each an alias of or a call into
// its room; users configure everything through package sdk (metrics,
// placement in cells, archives, retention, the leader's maintenance). Its
// other files are the payload codecs' until they move to their own
// package: encryption at rest (codec.go, sealed.go), blobs by reference
// (blob.go, blobstore.go), archive locations (archive.go), erasure
// (erase.go), and the clock (clock.go).
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
