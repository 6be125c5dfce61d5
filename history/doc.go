// Package history defines a task's event log: the event types, their
// versioned JSON encoding, and [Replay], the total fold of a task's events
// into its [State].
//
// The package is pure: no I/O, no clock, no goroutines. Times are fields of
// events supplied by the writer. It imports nothing of cairn; every other
// cairn package may import it.
//
// Invariants a valid history keeps, and Replay checks:
//   - seq runs 1..n without gaps and starts with task_scheduled;
//   - nothing follows a terminal event (completed, failed, cancelled,
//     dead-lettered);
//   - attempts are numbered 1, 2, … and each attempt_started raises the
//     lease epoch;
//   - each step position completes once, within the attempt that holds the
//     lease; parallel steps may complete ahead of a position not on record
//     (State.Ahead).
package history
