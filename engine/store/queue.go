package store

import (
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
)

// QueueGauge is one queue's row of the queue collector: its unfinished
// tasks and dead letters by status, and how long its oldest due task has
// waited.
type QueueGauge struct {
	Namespace, Queue string
	Tasks            map[history.Status]int64
	OldestDue        time.Duration
}

// The queue values the seam reads and writes are the ones users get back,
// from package cairntype. These aliases keep the seam's names for them
// until its methods take *XParams and name cairntype themselves.
type (
	// QueueConfig is [cairntype.QueueConfig].
	QueueConfig = cairntype.QueueConfig
	// QueueInfo is [cairntype.QueueInfo].
	QueueInfo = cairntype.QueueInfo
	// QueueWait is [cairntype.QueueWait].
	QueueWait = cairntype.QueueWait
	// QueueStats is [cairntype.QueueStats].
	QueueStats = cairntype.QueueStats
)

// CheckRateLimit checks a rate limit before a store writes it.
func CheckRateLimit(taskType string, maxStarts int, per time.Duration) error {
	if maxStarts < 1 || per < time.Millisecond {
		return errors.Newf("rate limit of %s: at least 1 start per at least 1ms (got %d per %s)", taskType, maxStarts, per)
	}
	return nil
}
