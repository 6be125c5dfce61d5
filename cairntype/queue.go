package cairntype

import (
	"time"

	"github.com/cockroachdb/errors"
)

// QueueConfig is a queue's settings. Zero values mean no limit.
type QueueConfig struct {
	Namespace string
	Name      string
	// MaxWaiting bounds the tasks waiting (pending or retrying) in the
	// queue: a start beyond it fails with ErrQueueFull.
	MaxWaiting int
	// Concurrency bounds the queue's tasks running at once, across every
	// worker (enforced in the claim).
	Concurrency int
}

// Validate checks the settings before a store writes them.
func (c QueueConfig) Validate() error {
	if c.Namespace == "" || c.Name == "" {
		return errors.New("queue settings: namespace and name are required")
	}
	if c.MaxWaiting < 0 || c.Concurrency < 0 {
		return errors.Newf("queue %s: MaxWaiting and Concurrency must not be negative", c.Name)
	}
	return nil
}

// QueueInfo is a queue's settings and its current load.
type QueueInfo struct {
	QueueConfig
	Waiting, Running int
}

// QueueWait is how long due tasks of one queue and priority have waited.
type QueueWait struct {
	Queue    string
	Priority int
	Waiting  int       // due tasks waiting (pending or retrying, run time passed)
	Oldest   time.Time // run time of the longest-waiting one
}

// QueueStats is a queue's load now and its flow over a recent window.
type QueueStats struct {
	Queue   string `json:"queue"`
	Waiting int    `json:"waiting"` // pending or retrying, due or not
	Due     int    `json:"due"`     // waiting and due now
	Running int    `json:"running"`
	// OldestDueAge is how long the longest-waiting due task has waited
	// (since its run time); zero when none is due.
	OldestDueAge time.Duration `json:"oldest_due_age"`
	// Over the window: tasks completed, tasks that ended failed,
	// dead-lettered or expired, and failed attempts (retries included).
	Completed      int           `json:"completed"`
	Failed         int           `json:"failed"`
	AttemptsFailed int           `json:"attempts_failed"`
	Window         time.Duration `json:"window"`
	MaxWaiting     int           `json:"max_waiting,omitempty"` // 0: unbounded
	Concurrency    int           `json:"concurrency,omitempty"` // 0: unlimited
}

// Throughput is the tasks finished per second over the window.
func (q QueueStats) Throughput() float64 {
	if q.Window <= 0 {
		return 0
	}
	return float64(q.Completed+q.Failed) / q.Window.Seconds()
}

// ErrorRate is the share of the window's finished tasks that did not
// complete; zero when none finished.
func (q QueueStats) ErrorRate() float64 {
	if q.Completed+q.Failed == 0 {
		return 0
	}
	return float64(q.Failed) / float64(q.Completed+q.Failed)
}
