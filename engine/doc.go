// Package engine is cairn's storage and scheduling: the PostgreSQL store
// (pgx v5), the migration runner, claiming under leases with epoch fencing,
// heartbeats, the rescuer and its leader lease, and LISTEN/NOTIFY wake-ups.
//
// It imports history and migrations, and nothing else of cairn. It reaches
// user code only through the small non-generic [Handler] interface, which
// package sdk implements.
//
// Invariant: every write appends events and updates the task's projection
// row in the same statement, and the row always equals history.Replay of the
// task's events (lease_expires_at aside, which heartbeats extend outside the
// log). Writers state the sequence they expect and, when acting for an
// attempt, the lease epoch they hold; a racing writer gets [ErrConflict], a
// stale one [ErrFenced].
package engine
