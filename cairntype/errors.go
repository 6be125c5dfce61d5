package cairntype

import (
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// The errors a request may end with. The stores mark their errors with
// them, so errors.Is finds them however wrapped; package sdk re-exports
// those a client's caller acts on (sdk.ErrNotFound is ErrNotFound).
var (
	// ErrNotFound: no task with that id in that namespace.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the task moved on since the caller read it (another
	// writer appended first), or a unique key is taken.
	ErrConflict = errors.New("conflict")
	// ErrTaskState: the task's status does not allow the request (retrying
	// a task that is not dead-lettered, for instance). The message names
	// the status.
	ErrTaskState = errors.New("task state does not allow this")
	// ErrRetryable marks a statement PostgreSQL aborted for a reason that
	// goes away when it runs again: a deadlock or a serialization failure.
	ErrRetryable = errors.New("retryable database error")
	// ErrUnsupported: the store does not implement the request (the
	// embedded store, for a feature it does not have yet). The message names
	// it.
	ErrUnsupported = errors.New("not supported by this store")
	// ErrIdempotencyKeyReused: a start that refuses a reused key (the
	// store's TaskStartParams.RefuseKeyReuse, which the sdk's starts set)
	// found its idempotency key taken by a task of another type or input.
	// Nothing of the start (or of its batch) was written, and the message
	// names neither the task nor its state.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with another type or input")
)

// ErrWaitEnded and ErrWaitNotReached mark a signal for one receive (the
// sdk's SignalOpts.ForWait) refused, with nothing written, because the
// task does not wait there: it has gone past that receive (or finished),
// or it has not reached it. Both are marked ErrTaskState too.
var (
	ErrWaitEnded      = errors.New("the wait has ended")
	ErrWaitNotReached = errors.New("the task does not wait there yet")
)

// ErrUnavailable marks an error of the database being out of reach (a
// refused, reset or dropped connection, a server shutting down or starting
// up) rather than a refusal of the statement itself: worth trying again
// after a pause. Drivers mark it where they interpret their errors.
var ErrUnavailable = errors.New("database unavailable")

// ErrDiagnosisTooSlow marks a diagnosis that gave up reading its window's
// history (a statement timeout): a shorter window may do.
var ErrDiagnosisTooSlow = errors.New("diagnosis took too long")

// ErrQueueFull marks a start refused because a bounded queue holds its
// maximum of waiting tasks. The error is a [*QueueFullError]; nothing of the
// start was written.
var ErrQueueFull = errors.New("queue full")

// QueueFullError says which queue refused a start, and when to try again.
type QueueFullError struct {
	Namespace, Queue string
	Waiting          int // tasks waiting when the start was refused
	MaxWaiting       int
	Adding           int // tasks the start would have added to the queue
	// RetryAfter is a hint: how long the queue's workers might take to make
	// room.
	RetryAfter time.Duration
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue %s/%s is full: %d waiting, %d more would pass its maximum of %d; retry after %s",
		e.Namespace, e.Queue, e.Waiting, e.Adding, e.MaxWaiting, e.RetryAfter)
}

// Is makes errors.Is(err, ErrQueueFull) hold.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// ErrHistoryFull marks a signal refused because its task's history is at
// its bound (the store's HistoryLimits: as many events as it allows, or
// the signal would take its event bytes past its bytes). The error is a
// [*HistoryFullError]; nothing was written.
var ErrHistoryFull = errors.New("history full")

// HistoryFullError says which bound refused an append to a task's history.
type HistoryFullError struct {
	TaskID uuid.UUID
	// Events is the number of events the history holds; Bytes the bytes of
	// their data the bound counts (see the store's HistoryLimits). Adding
	// and AddingBytes are what the refused append would have added.
	Events, Adding      int64
	Bytes, AddingBytes  int64
	MaxEvents, MaxBytes int64
}

func (e *HistoryFullError) Error() string {
	if e.MaxEvents > 0 && e.Events+e.Adding > e.MaxEvents {
		return fmt.Sprintf("task %s: its history holds %d events, at the limit of %d: no more signals are accepted (a workflow this long should continue as a new task)",
			e.TaskID, e.Events, e.MaxEvents)
	}
	return fmt.Sprintf("task %s: its history holds %d bytes of events, and %d more would pass the limit of %d: no more signals are accepted",
		e.TaskID, e.Bytes, e.AddingBytes, e.MaxBytes)
}

// Is makes errors.Is(err, ErrHistoryFull) hold.
func (e *HistoryFullError) Is(target error) bool { return target == ErrHistoryFull }
