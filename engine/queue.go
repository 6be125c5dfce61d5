package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

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

// The retry-after hint of a full queue is how long its workers should take
// to start enough of its waiting tasks to make room, estimated from what
// runs now (Little's law): L tasks running whose attempts are on average A
// old take about 2A each, so the queue starts L/2A tasks a second. With
// nothing running, no worker is serving the queue and room is not near.
const (
	minQueueFullRetryAfter  = 100 * time.Millisecond
	maxQueueFullRetryAfter  = 5 * time.Minute
	idleQueueFullRetryAfter = 30 * time.Second
)

// QueueFullRetryAfter estimates how long until need waiting tasks of a
// queue have started, given running tasks of mean age meanAge.
func QueueFullRetryAfter(need, running int, meanAge time.Duration) time.Duration {
	if running == 0 {
		return idleQueueFullRetryAfter
	}
	d := time.Duration(float64(need) * 2 * float64(meanAge) / float64(running))
	return min(max(d, minQueueFullRetryAfter), maxQueueFullRetryAfter)
}

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

// QueueSet creates or replaces a queue's settings.
func (s *PGStore) QueueSet(ctx context.Context, c QueueConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.sql("QueueUpsert"), pgx.NamedArgs{
		"namespace": c.Namespace, "name": c.Name, "max_waiting": nullPositive(c.MaxWaiting), "concurrency": nullPositive(c.Concurrency),
	})
	return errors.Wrapf(interpretError(err), "set queue %s", c.Name)
}

// QueueList returns the configured queues of namespace with their load.
func (s *PGStore) QueueList(ctx context.Context, namespace string) ([]QueueInfo, error) {
	rows, err := s.pool.Query(ctx, s.sql("QueueList"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list queues")
	}
	var out []QueueInfo
	var name string
	var maxWaiting, concurrency *int32
	var waiting, running int64
	_, err = pgx.ForEachRow(rows, []any{&name, &maxWaiting, &concurrency, &waiting, &running}, func() error {
		out = append(out, QueueInfo{
			QueueConfig: QueueConfig{Namespace: namespace, Name: name, MaxWaiting: int(deref(maxWaiting)), Concurrency: int(deref(concurrency))},
			Waiting:     int(waiting), Running: int(running),
		})
		return nil
	})
	return out, errors.Wrap(interpretError(err), "list queues")
}

type boundedQueue struct {
	namespace, name string
	maxWaiting      int
}

// boundedQueues returns the bounded queues among those of a start, by the
// named query (QueueBounded, or QueueBoundedLock to lock their rows).
func (s *PGStore) boundedQueues(ctx context.Context, q Querier, query string, namespaces, queues []string) ([]boundedQueue, error) {
	rows, err := q.Query(ctx, s.sql(query), pgx.NamedArgs{"namespaces": namespaces, "names": queues})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read queue settings")
	}
	var out []boundedQueue
	var b boundedQueue
	var maxWaiting int32
	_, err = pgx.ForEachRow(rows, []any{&b.namespace, &b.name, &maxWaiting}, func() error {
		b.maxWaiting = int(maxWaiting)
		out = append(out, b)
		return nil
	})
	return out, errors.Wrap(interpretError(err), "read queue settings")
}

// checkCapacity locks the bounded queues of a start and refuses it if it
// would take one past its maximum. Under the lock, the count sees every
// start committed before: two starts cannot both squeeze past the bound.
func (s *PGStore) checkCapacity(ctx context.Context, tx pgx.Tx, namespaces, queues []string) error {
	bounded, err := s.boundedQueues(ctx, tx, "QueueBoundedLock", namespaces, queues)
	if err != nil {
		return err
	}
	for _, b := range bounded {
		adding := 0
		for i := range queues {
			if namespaces[i] == b.namespace && queues[i] == b.name {
				adding++
			}
		}
		var waiting int64
		err := tx.QueryRow(ctx, s.sql("QueueWaitingCount"), pgx.NamedArgs{"namespace": b.namespace, "queue": b.name}).Scan(&waiting)
		if err != nil {
			return errors.Wrapf(interpretError(err), "count waiting tasks of queue %s", b.name)
		}
		if int(waiting)+adding > b.maxWaiting {
			var running int
			var meanAge float64
			err := tx.QueryRow(ctx, s.sql("QueueRunning"), pgx.NamedArgs{"namespace": b.namespace, "queue": b.name}).Scan(&running, &meanAge)
			if err != nil {
				return errors.Wrapf(interpretError(err), "read running tasks of queue %s", b.name)
			}
			need := int(waiting) + adding - b.maxWaiting
			return &QueueFullError{Namespace: b.namespace, Queue: b.name, Waiting: int(waiting), MaxWaiting: b.maxWaiting,
				Adding: adding, RetryAfter: QueueFullRetryAfter(need, running, time.Duration(meanAge*float64(time.Second)))}
		}
	}
	return nil
}

func nullPositive(n int) *int32 {
	if n <= 0 {
		return nil
	}
	v := int32(n)
	return &v
}

// QueueWait is how long due tasks of one queue and priority have waited.
type QueueWait struct {
	Queue    string
	Priority int
	Waiting  int       // due tasks waiting (pending or retrying, run time passed)
	Oldest   time.Time // run time of the longest-waiting one
}

// QueueWaits returns, per queue and priority of namespace, the due tasks
// waiting and the run time of the oldest: what starvation would look like.
func (s *PGStore) QueueWaits(ctx context.Context, namespace string) ([]QueueWait, error) {
	rows, err := s.pool.Query(ctx, s.sql("QueueWaits"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "queue waits")
	}
	var out []QueueWait
	var w QueueWait
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&w.Queue, &w.Priority, &count, &w.Oldest}, func() error {
		w.Waiting = int(count)
		w.Oldest = w.Oldest.UTC()
		out = append(out, w)
		return nil
	})
	return out, errors.Wrap(interpretError(err), "queue waits")
}

// RateLimitSet limits the attempts of taskType (every version) that start
// in namespace to maxStarts per interval, across all workers: a token
// bucket of maxStarts, refilled continuously, which claims spend.
func (s *PGStore) RateLimitSet(ctx context.Context, namespace, taskType string, maxStarts int, per time.Duration) error {
	if err := CheckRateLimit(taskType, maxStarts, per); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.sql("RateLimitUpsert"), pgx.NamedArgs{
		"namespace": namespace, "task_type": taskType, "max_starts": maxStarts, "per_ms": per.Milliseconds(),
	})
	return errors.Wrapf(interpretError(err), "set rate limit of %s", taskType)
}

// CheckRateLimit checks a rate limit before a store writes it.
func CheckRateLimit(taskType string, maxStarts int, per time.Duration) error {
	if maxStarts < 1 || per < time.Millisecond {
		return errors.Newf("rate limit of %s: at least 1 start per at least 1ms (got %d per %s)", taskType, maxStarts, per)
	}
	return nil
}

// RateLimitDelete removes taskType's rate limit.
func (s *PGStore) RateLimitDelete(ctx context.Context, namespace, taskType string) error {
	_, err := s.pool.Exec(ctx, s.sql("RateLimitDelete"), pgx.NamedArgs{"namespace": namespace, "task_type": taskType})
	return errors.Wrapf(interpretError(err), "delete rate limit of %s", taskType)
}
