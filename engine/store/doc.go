// Package store is the seam between cairn's runtime and a database: the
// [Executor] interface of statement-level operations, run on a [Store] or
// in a transaction of it ([Tx], from [Executor.Begin]), the parameters and
// rows they take and return ([Task], [ClaimedTask], [Schedule],
// [AuditEvent], ...), the sentinel errors drivers mark their errors with,
// the [Listener] each driver implements for wake-ups, the [Observer] a
// driver counts its writes into, and the [Clock].
//
// The values users get back (queue info and stats, a diagnosis, namespace
// settings, task types, most sentinel errors) live in package cairntype.
// The seam still names them as aliases ([QueueInfo] is
// cairntype.QueueInfo, [ErrNotFound] is cairntype.ErrNotFound) until its
// methods take *XParams and name cairntype themselves.
//
// Two drivers implement it: engine/pgstore (PostgreSQL) and
// engine/sqlitestore (one SQLite file). engine/storetest holds both to the
// same behaviour. What a request on a task means (cancel, compensate,
// requeue, rescue, expiry, a diagnosis's causes) is decided above the seam,
// in package engine, written once over any Store.
//
// The package imports history and cairntype, and nothing else of cairn.
package store
