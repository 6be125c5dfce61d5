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

// QueueSetParams creates or replaces a queue's settings ([Store.QueueSet]).
type QueueSetParams struct {
	// Namespace and Name name the queue. Required.
	Namespace, Name string
	// MaxWaiting bounds the queue's waiting tasks (pending or retrying): a
	// start beyond it is refused ([QueueFullError]). Concurrency bounds its
	// running tasks across all workers. 0: no bound; never negative.
	MaxWaiting, Concurrency int
}

// Validate checks the settings: what every store does first.
func (p *QueueSetParams) Validate() error {
	if p == nil {
		return errors.New("queue settings: namespace and name are required")
	}
	return p.config().Validate()
}

// config is the settings as cairntype holds them.
func (p *QueueSetParams) config() QueueConfig {
	return QueueConfig{Namespace: p.Namespace, Name: p.Name, MaxWaiting: p.MaxWaiting, Concurrency: p.Concurrency}
}

// QueueListParams lists the queues with settings of a namespace, with
// their load ([Store.QueueList]).
type QueueListParams struct {
	// Namespace is the queues' namespace. Required.
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *QueueListParams) Validate() error {
	return namespaceRequired("list queues", p == nil || p.Namespace == "")
}

// QueueWaitListParams lists, per queue and priority of a namespace, the
// due tasks waiting and the run time of the oldest
// ([Store.QueueWaitList]).
type QueueWaitListParams struct {
	// Namespace is the tasks' namespace. Required.
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *QueueWaitListParams) Validate() error {
	return namespaceRequired("queue waits", p == nil || p.Namespace == "")
}

// QueueStatsListParams lists every queue of a namespace that has
// unfinished tasks, settings, or tasks finished within Window
// ([Store.QueueStatsList]).
type QueueStatsListParams struct {
	// Namespace is the queues' namespace. Required.
	Namespace string
	// Window is how far back the finished counts look, ending now.
	// Positive.
	Window time.Duration
}

// Validate checks the parameters: what every store does first.
func (p *QueueStatsListParams) Validate() error {
	if err := namespaceRequired("queue stats", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	if p.Window <= 0 {
		return errors.Newf("queue stats: window %s is not positive", p.Window)
	}
	return nil
}

// QueueGaugeListParams reads the queue gauges ([Store.QueueGaugeList]):
// the metrics collector's read of a whole store, which Prometheus scrapes
// per store, not per namespace.
type QueueGaugeListParams struct {
	// Namespace, when set, keeps the gauges of that namespace only. ""
	// reads every namespace's: the collector's read, an operator's of the
	// whole store (not a namespace user's request), so not refused.
	Namespace string
}

// RateLimitSetParams limits the attempts of a task type (every version)
// that start in a namespace, across all workers ([Store.RateLimitSet]): a
// token bucket of MaxStarts, refilled continuously, which claims spend.
type RateLimitSetParams struct {
	// Namespace and TaskType name the limited type. Required.
	Namespace, TaskType string
	// MaxStarts per Per: at least 1 start per at least 1ms.
	MaxStarts int
	Per       time.Duration
}

// Validate checks the limit: what every store does first.
func (p *RateLimitSetParams) Validate() error {
	if p == nil || p.Namespace == "" || p.TaskType == "" {
		return errors.New("rate limit: namespace and task type are required")
	}
	if p.MaxStarts < 1 || p.Per < time.Millisecond {
		return errors.Newf("rate limit of %s: at least 1 start per at least 1ms (got %d per %s)", p.TaskType, p.MaxStarts, p.Per)
	}
	return nil
}

// RateLimitDeleteParams removes a task type's rate limit
// ([Store.RateLimitDelete]); removing one that does not exist does
// nothing.
type RateLimitDeleteParams struct {
	// Namespace and TaskType name the limited type. Required.
	Namespace, TaskType string
}

// Validate checks the parameters: what every store does first.
func (p *RateLimitDeleteParams) Validate() error {
	if p == nil || p.Namespace == "" || p.TaskType == "" {
		return errors.New("delete rate limit: namespace and task type are required")
	}
	return nil
}

// namespaceRequired refuses the parameters of a namespace's read that
// name none (missing): what a store does first with them.
func namespaceRequired(what string, missing bool) error {
	if missing {
		return errors.Newf("%s: namespace is required", what)
	}
	return nil
}
