package store

import (
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cockroachdb/errors"
)

// ErrFenced: the caller's lease epoch is no longer the task's; the attempt
// it acts for is over and its writes are refused.
var ErrFenced = errors.New("fenced: lease epoch is stale")

// ErrNamespaceMoved marks a write refused because its namespace has moved
// to another cell (pgstore.MoveNamespace's fence). Such an error is
// [ErrUnavailable] too: the request succeeds once the process has a
// placement map that places the namespace where it went.
var ErrNamespaceMoved = errors.New("namespace moved to another cell")

// The sentinel errors drivers mark their errors with, where a request may
// end with them, are the ones users see, from package cairntype: the
// same values, so errors.Is matches either name. See cairntype for what
// each means.
var (
	ErrNotFound             = cairntype.ErrNotFound
	ErrConflict             = cairntype.ErrConflict
	ErrTaskState            = cairntype.ErrTaskState
	ErrRetryable            = cairntype.ErrRetryable
	ErrUnsupported          = cairntype.ErrUnsupported
	ErrIdempotencyKeyReused = cairntype.ErrIdempotencyKeyReused // a start with RefuseKeyReuse ([TaskStartParams])
	ErrWaitEnded            = cairntype.ErrWaitEnded            // a signal ForWait ([TaskSignalParams])
	ErrWaitNotReached       = cairntype.ErrWaitNotReached
	ErrUnavailable          = cairntype.ErrUnavailable
	ErrDiagnosisTooSlow     = cairntype.ErrDiagnosisTooSlow
	ErrQueueFull            = cairntype.ErrQueueFull   // the error is a [*QueueFullError]
	ErrHistoryFull          = cairntype.ErrHistoryFull // over [HistoryLimits]; the error is a [*HistoryFullError]
)

// The error types of those errors, cairntype's; these aliases keep the
// seam's names for them.
type (
	// QueueFullError is [cairntype.QueueFullError].
	QueueFullError = cairntype.QueueFullError
	// HistoryFullError is [cairntype.HistoryFullError].
	HistoryFullError = cairntype.HistoryFullError
)
