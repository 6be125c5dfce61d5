package pgstore

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// QueueGaugeList reads the task counts of every queue by status (of
// p.Namespace's queues, when set), in one grouped query.
func (s *Store) QueueGaugeList(ctx context.Context, p *store.QueueGaugeListParams) ([]*store.QueueGauge, error) {
	rows, err := s.db.Query(ctx, s.sql("MetricsQueueDepths"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read queue depths")
	}
	var out []*store.QueueGauge
	byQueue := map[[2]string]*store.QueueGauge{}
	var namespace, queue, status string
	var count int64
	var oldestSeconds *float64
	_, err = pgx.ForEachRow(rows, []any{&namespace, &queue, &status, &count, &oldestSeconds}, func() error {
		key := [2]string{namespace, queue}
		q := byQueue[key]
		if q == nil {
			q = &store.QueueGauge{Namespace: namespace, Queue: queue, Tasks: map[history.Status]int64{}}
			byQueue[key] = q
			out = append(out, q)
		}
		q.Tasks[history.Status(status)] = count
		if oldestSeconds != nil {
			q.OldestDue = max(q.OldestDue, time.Duration(*oldestSeconds*float64(time.Second)))
		}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read queue depths")
	}
	return out, nil
}

// QueueSet creates or replaces a queue's settings.
func (s *Store) QueueSet(ctx context.Context, p *store.QueueSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql("QueueUpsert"), pgx.NamedArgs{
		"namespace": p.Namespace, "name": p.Name, "max_waiting": nullPositive(p.MaxWaiting), "concurrency": nullPositive(p.Concurrency),
		"channel": s.channel,
	})
	return errors.Wrapf(interpretError(err), "set queue %s", p.Name)
}

// QueueList returns the configured queues of p.Namespace with their load.
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]store.QueueInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	namespace := p.Namespace
	rows, err := s.db.Query(ctx, s.sql("QueueList"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list queues")
	}
	var out []store.QueueInfo
	var name string
	var maxWaiting, concurrency *int32
	var waiting, running int64
	_, err = pgx.ForEachRow(rows, []any{&name, &maxWaiting, &concurrency, &waiting, &running}, func() error {
		out = append(out, store.QueueInfo{
			QueueConfig: store.QueueConfig{Namespace: namespace, Name: name, MaxWaiting: int(deref(maxWaiting)), Concurrency: int(deref(concurrency))},
			Waiting:     int(waiting), Running: int(running),
		})
		return nil
	})
	return out, errors.Wrap(interpretError(err), "list queues")
}

// lockBoundedQueues locks the rows of the bounded queues among those of a
// start (QueueBoundedLock) and returns them.
func (s *Store) lockBoundedQueues(ctx context.Context, tx pgx.Tx, namespaces, queues []string) ([]boundedQueue, error) {
	rows, err := tx.Query(ctx, s.sql("QueueBoundedLock"), pgx.NamedArgs{"namespaces": namespaces, "names": queues})
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
// Only the starts that would make a task count: a start whose idempotency
// key is taken returns the task holding it (the insert finds it), so a
// retried start into a full queue is not refused.
func (s *Store) checkCapacity(ctx context.Context, tx pgx.Tx, plans []plan.StartPlan, at time.Time) error {
	namespaces, queues := make([]string, len(plans)), make([]string, len(plans))
	for i, pl := range plans {
		namespaces[i], queues[i] = pl.Scheduled.Namespace, pl.Scheduled.Queue
	}
	bounded, err := s.lockBoundedQueues(ctx, tx, namespaces, queues)
	if err != nil || len(bounded) == 0 {
		return err
	}
	fresh, err := s.freshStarts(ctx, tx, plans, at)
	if err != nil {
		return err
	}
	for _, b := range bounded {
		adding := 0
		for _, pl := range fresh {
			if pl.Scheduled.Namespace == b.namespace && pl.Scheduled.Queue == b.name {
				adding++
			}
		}
		if adding == 0 {
			continue
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
			return &store.QueueFullError{Namespace: b.namespace, Queue: b.name, Waiting: int(waiting), MaxWaiting: b.maxWaiting,
				Adding: adding, RetryAfter: plan.QueueFullRetryAfter(need, running, time.Duration(meanAge*float64(time.Second)))}
		}
	}
	return nil
}

// freshStarts returns the plans that would make a task: those without an
// idempotency key, and those whose key no task holds yet (a key named
// twice in the batch once). The tasks holding keys are locked against
// removal (FOR KEY SHARE) until the transaction ends, so a start counted
// as existing stays existing for the insert. A start refusing its key's
// reuse that is not the start that took the key is refused here, before
// capacity, as the embedded store does.
func (s *Store) freshStarts(ctx context.Context, tx pgx.Tx, plans []plan.StartPlan, at time.Time) ([]plan.StartPlan, error) {
	var keyNS, keys []string
	for _, pl := range plans {
		if pl.Scheduled.IdempotencyKey != "" {
			keyNS, keys = append(keyNS, pl.Scheduled.Namespace), append(keys, pl.Scheduled.IdempotencyKey)
		}
	}
	if len(keys) == 0 {
		return plans, nil
	}
	rows, err := tx.Query(ctx, s.sql("TaskHoldingKeysLock"), pgx.NamedArgs{"namespaces": keyNS, "keys": keys})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "look up the tasks holding idempotency keys")
	}
	held := map[[2]string]plan.KeyHolder{}
	var namespace, key string
	var h plan.KeyHolder
	_, err = pgx.ForEachRow(rows, []any{&namespace, &key, &h.Type, &h.Input}, func() error {
		held[[2]string{namespace, key}] = plan.KeyHolder{Type: h.Type, Input: append([]byte(nil), h.Input...)}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "look up the tasks holding idempotency keys")
	}
	// Keys of tasks retention removed are still held.
	rows, err = tx.Query(ctx, s.sql("RetiredKeysHoldingLock"), pgx.NamedArgs{"namespaces": keyNS, "keys": keys, "at": at})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "look up retired idempotency keys")
	}
	_, err = pgx.ForEachRow(rows, []any{&namespace, &key, &h.Type, &h.InputDigest}, func() error {
		k := [2]string{namespace, key}
		if _, ok := held[k]; !ok {
			held[k] = plan.KeyHolder{Type: h.Type, InputDigest: append([]byte(nil), h.InputDigest...), Removed: true}
		}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "look up retired idempotency keys")
	}
	var fresh []plan.StartPlan
	seen := map[[2]string]bool{}
	for i, pl := range plans {
		k := [2]string{pl.Scheduled.Namespace, pl.Scheduled.IdempotencyKey}
		if k[1] == "" {
			fresh = append(fresh, pl)
			continue
		}
		if h, ok := held[k]; ok {
			if pl.RefuseKeyReuse && !h.SameStart(pl.Scheduled) {
				return nil, errors.Wrapf(plan.KeyReused(), "start task %d", i)
			}
			continue
		}
		if !seen[k] {
			seen[k] = true
			fresh = append(fresh, pl)
		}
	}
	return fresh, nil
}

// QueueWaitList returns, per queue and priority of p.Namespace, the due
// tasks waiting and the run time of the oldest: what starvation would look
// like.
func (s *Store) QueueWaitList(ctx context.Context, p *store.QueueWaitListParams) ([]store.QueueWait, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("QueueWaits"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "queue waits")
	}
	var out []store.QueueWait
	var w store.QueueWait
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&w.Queue, &w.Priority, &count, &w.Oldest}, func() error {
		w.Waiting = int(count)
		w.Oldest = w.Oldest.UTC()
		out = append(out, w)
		return nil
	})
	return out, errors.Wrap(interpretError(err), "queue waits")
}

// RateLimitSet limits the attempts of p.TaskType (every version) that
// start in p.Namespace to p.MaxStarts per p.Per, across all workers: a
// token bucket of MaxStarts, refilled continuously, which claims spend.
func (s *Store) RateLimitSet(ctx context.Context, p *store.RateLimitSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql("RateLimitUpsert"), pgx.NamedArgs{
		"namespace": p.Namespace, "task_type": p.TaskType, "max_starts": p.MaxStarts, "per_ms": p.Per.Milliseconds(),
	})
	return errors.Wrapf(interpretError(err), "set rate limit of %s", p.TaskType)
}

// RateLimitDelete removes p.TaskType's rate limit.
func (s *Store) RateLimitDelete(ctx context.Context, p *store.RateLimitDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql("RateLimitDelete"), pgx.NamedArgs{"namespace": p.Namespace, "task_type": p.TaskType})
	return errors.Wrapf(interpretError(err), "delete rate limit of %s", p.TaskType)
}

// QueueStatsList returns every queue of p.Namespace that has unfinished
// tasks, settings, or tasks finished within p.Window, by name.
func (s *Store) QueueStatsList(ctx context.Context, p *store.QueueStatsListParams) ([]store.QueueStats, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	window := p.Window
	rows, err := s.db.Query(ctx, s.sql("QueueStats"), pgx.NamedArgs{"namespace": p.Namespace, "window_seconds": window.Seconds()})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "queue stats")
	}
	stats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.QueueStats, error) {
		q := store.QueueStats{Window: window}
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
