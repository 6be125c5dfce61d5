package engine

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

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

// QueueStatsList returns every queue of namespace that has unfinished
// tasks, settings, or tasks finished within window, by name.
func (s *PGStore) QueueStatsList(ctx context.Context, namespace string, window time.Duration) ([]QueueStats, error) {
	if window <= 0 {
		return nil, errors.Newf("queue stats: window %s is not positive", window)
	}
	rows, err := s.pool.Query(ctx, s.sql("QueueStats"), pgx.NamedArgs{"namespace": namespace, "window_seconds": window.Seconds()})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "queue stats")
	}
	stats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueStats, error) {
		q := QueueStats{Window: window}
		var oldest *time.Time
		var maxWaiting, concurrency *int32
		var now time.Time
		err := row.Scan(&q.Queue, &q.Waiting, &q.Due, &q.Running, &oldest, &q.Completed, &q.Failed, &q.AttemptsFailed,
			&maxWaiting, &concurrency, &now)
		if oldest != nil {
			q.OldestDueAge = max(0, now.Sub(*oldest))
		}
		q.MaxWaiting, q.Concurrency = int(deref(maxWaiting)), int(deref(concurrency))
		return q, err
	})
	return stats, errors.Wrap(interpretError(err), "queue stats")
}
