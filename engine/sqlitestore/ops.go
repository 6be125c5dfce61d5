package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// DeadLetterList implements [store.Store]: newest first.
func (s *Store) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	var beforeAt int64
	var beforeID string
	if p.Before != nil {
		beforeAt, beforeID = us(p.Before.FinishedAt), p.Before.ID.String()
	}
	query := "DeadLetterList"
	if p.OmitPayloads {
		query = "DeadLetterListLean"
	}
	tasks, err := queryTasks(ctx, s.q, query, p.Namespace, p.Type, p.Before != nil, beforeAt, beforeID, limit)
	return tasks, errors.Wrap(err, "list dead letters")
}

// TaskListLeaseExpired implements [store.Store].
func (s *Store) TaskListLeaseExpired(ctx context.Context, p *store.LeaseExpiryParams) ([]uuid.UUID, error) {
	ids, err := queryIDs(ctx, s.q, "TaskListExpired", us(s.now().Add(-p.ExpiredFor)), p.Max)
	return ids, errors.Wrap(err, "list expired leases")
}

// TaskLeaseNextExpiry implements [store.Store]: by the store's clock.
func (s *Store) TaskLeaseNextExpiry(ctx context.Context, p *store.LeaseExpiryParams) (time.Duration, bool, error) {
	now := s.now()
	var next sql.NullInt64
	if err := s.q.queryRow(ctx, "TaskLeaseNextExpiry", us(now.Add(-p.ExpiredFor))).Scan(&next); err != nil {
		return 0, false, errors.Wrap(interpret(err), "read the next lease expiry")
	}
	if !next.Valid {
		return 0, false, nil
	}
	return max(0, fromUS(next.Int64).Add(p.ExpiredFor).Sub(now)), true, nil
}

// TaskListStartExpired implements [store.Store].
func (s *Store) TaskListStartExpired(ctx context.Context, p *store.TaskListStartExpiredParams) ([]uuid.UUID, error) {
	ids, err := queryIDs(ctx, s.q, "TaskListStartExpired", us(s.now()), p.Max)
	return ids, errors.Wrap(err, "list tasks past their start deadline")
}

// LeaderAttempt implements [store.Store].
func (s *Store) LeaderAttempt(ctx context.Context, p *store.LeaderAttemptParams) (bool, error) {
	name, owner, ttl := p.Name, p.Owner, p.TTL
	var got string
	err := s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		err := tx.queryRow(ctx, "LeaderAttempt", name, owner, now, now+ttl.Microseconds(), now).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return interpret(err)
	})
	if err != nil {
		return false, errors.Wrapf(err, "attempt leadership of %s", name)
	}
	return got == owner, nil
}

// LeaderResign implements [store.Store].
func (s *Store) LeaderResign(ctx context.Context, p *store.LeaderResignParams) error {
	_, err := s.q.exec(ctx, "LeaderResign", p.Name, p.Owner)
	return errors.Wrapf(interpret(err), "resign leadership of %s", p.Name)
}

// QueueSet implements [store.Store].
func (s *Store) QueueSet(ctx context.Context, p *store.QueueSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.q.exec(ctx, "QueueUpsert",
		p.Namespace, p.Name, nullPositive(p.MaxWaiting), nullPositive(p.Concurrency), us(s.now()))
	if err == nil {
		// A limit raised or lifted may free a queue's waiting tasks.
		s.announce(store.Notification{Ready: true})
	}
	return errors.Wrapf(interpret(err), "set queue %s", p.Name)
}

func nullPositive(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n > 0} }

// QueueList implements [store.Store].
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]store.QueueInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	namespace := p.Namespace
	rows, err := s.q.query(ctx, "QueueList", namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list queues")
	}
	defer rows.Close()
	var out []store.QueueInfo
	for rows.Next() {
		qi := store.QueueInfo{QueueConfig: store.QueueConfig{Namespace: namespace}}
		if err := rows.Scan(&qi.Name, &qi.MaxWaiting, &qi.Concurrency, &qi.Waiting, &qi.Running); err != nil {
			return nil, err
		}
		out = append(out, qi)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list queues")
}

// QueueWaitList implements [store.Store].
func (s *Store) QueueWaitList(ctx context.Context, p *store.QueueWaitListParams) ([]store.QueueWait, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "QueueWaits", p.Namespace, us(s.now()))
	if err != nil {
		return nil, errors.Wrap(interpret(err), "queue waits")
	}
	defer rows.Close()
	var out []store.QueueWait
	for rows.Next() {
		var w store.QueueWait
		var oldest int64
		if err := rows.Scan(&w.Queue, &w.Priority, &w.Waiting, &oldest); err != nil {
			return nil, err
		}
		w.Oldest = fromUS(oldest)
		out = append(out, w)
	}
	return out, errors.Wrap(interpret(rows.Err()), "queue waits")
}

// RateLimitSet implements [store.Store]: the bucket starts full.
func (s *Store) RateLimitSet(ctx context.Context, p *store.RateLimitSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.q.exec(ctx, "RateLimitUpsert",
		p.Namespace, p.TaskType, p.MaxStarts, p.Per.Milliseconds(), float64(p.MaxStarts), us(s.now()))
	return errors.Wrapf(interpret(err), "set rate limit of %s", p.TaskType)
}

// RateLimitDelete implements [store.Store].
func (s *Store) RateLimitDelete(ctx context.Context, p *store.RateLimitDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.q.exec(ctx, "RateLimitDelete", p.Namespace, p.TaskType)
	if err == nil {
		s.announce(store.Notification{Ready: true})
	}
	return errors.Wrapf(interpret(err), "delete rate limit of %s", p.TaskType)
}

// TaskTypeRegister implements [store.Store].
func (s *Store) TaskTypeRegister(ctx context.Context, p *store.TaskTypeRegisterParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Types) == 0 {
		return nil
	}
	return errors.Wrap(s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		for _, t := range p.Types {
			var stc sql.NullInt64
			if t.ScheduleToClose > 0 {
				stc = sql.NullInt64{Int64: t.ScheduleToClose.Milliseconds(), Valid: true}
			}
			declared, err := plan.SignalDeclarations(t.Signals)
			if err != nil {
				return err
			}
			if _, err := tx.exec(ctx, "TaskTypeRegister",
				p.Namespace, t.Type, t.Version, t.Queue, t.MaxAttempts, stc, p.Worker, now, declared); err != nil {
				return interpret(err)
			}
		}
		return nil
	}), "register task types")
}

// TaskTypeList implements [store.Store].
func (s *Store) TaskTypeList(ctx context.Context, p *store.TaskTypeListParams) ([]store.TaskType, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "TaskTypeList", p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list task types")
	}
	defer rows.Close()
	var out []store.TaskType
	for rows.Next() {
		var t store.TaskType
		var stc sql.NullInt64
		var at int64
		var signals sql.NullString
		if err := rows.Scan(&t.Namespace, &t.Type, &t.Version, &t.Queue, &t.MaxAttempts, &stc, &t.RegisteredBy, &at, &signals); err != nil {
			return nil, err
		}
		t.ScheduleToClose = time.Duration(stc.Int64) * time.Millisecond
		t.RegisteredAt = fromUS(at)
		var err error
		if signals.Valid {
			if t.Signals, err = plan.ReadSignalDeclarations([]byte(signals.String)); err != nil {
				return nil, errors.Wrapf(err, "task type %s@%d", t.Type, t.Version)
			}
		}
		out = append(out, t)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list task types")
}

// QueueGaugeList implements [store.Store].
func (s *Store) QueueGaugeList(ctx context.Context, p *store.QueueGaugeListParams) ([]*store.QueueGauge, error) {
	now := us(s.now())
	rows, err := s.q.query(ctx, "MetricsQueueDepths", now, p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "read queue depths")
	}
	defer rows.Close()
	var out []*store.QueueGauge
	byQueue := map[[2]string]*store.QueueGauge{}
	for rows.Next() {
		var ns, queue, status string
		var count int64
		var oldest sql.NullInt64
		if err := rows.Scan(&ns, &queue, &status, &count, &oldest); err != nil {
			return nil, err
		}
		g := byQueue[[2]string{ns, queue}]
		if g == nil {
			g = &store.QueueGauge{Namespace: ns, Queue: queue, Tasks: map[history.Status]int64{}}
			byQueue[[2]string{ns, queue}] = g
			out = append(out, g)
		}
		g.Tasks[history.Status(status)] = count
		if oldest.Valid {
			g.OldestDue = max(g.OldestDue, time.Duration(now-oldest.Int64)*time.Microsecond)
		}
	}
	return out, errors.Wrap(interpret(rows.Err()), "read queue depths")
}

// QueueStatsList implements [store.Store]: every queue of p.Namespace with
// unfinished tasks, settings, or finishes in the window.
func (s *Store) QueueStatsList(ctx context.Context, p *store.QueueStatsListParams) ([]store.QueueStats, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	window := p.Window
	now := us(s.now())
	rows, err := s.q.query(ctx, "QueueStats", p.Namespace, now, now-window.Microseconds())
	if err != nil {
		return nil, errors.Wrap(interpret(err), "queue stats")
	}
	defer rows.Close()
	var out []store.QueueStats
	for rows.Next() {
		q := store.QueueStats{Window: window}
		var oldest sql.NullInt64
		if err := rows.Scan(&q.Queue, &q.Waiting, &q.Due, &q.Running, &oldest, &q.Completed, &q.Failed, &q.AttemptsFailed,
			&q.MaxWaiting, &q.Concurrency); err != nil {
			return nil, err
		}
		if oldest.Valid {
			q.OldestDueAge = time.Duration(now-oldest.Int64) * time.Microsecond
		}
		out = append(out, q)
	}
	return out, errors.Wrap(interpret(rows.Err()), "queue stats")
}

// EventScan implements [store.Store]: one page of a namespace's events
// in [Since, Until), by (at, task id, seq), with their tasks' rows
// (events_at_idx serves the time range).
func (s *Store) EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error) {
	limit, since, err := plan.EventScanBounds(p)
	if err != nil {
		return nil, err
	}
	var afterAt, afterSeq int64
	var afterTask string
	if p.After != nil {
		afterAt, afterTask, afterSeq = us(p.After.At), p.After.TaskID.String(), p.After.Seq
	}
	types := make([]string, len(p.EventTypes))
	for i, t := range p.EventTypes {
		types[i] = string(t)
	}
	rows, err := s.q.query(ctx, "EventScan", us(since), us(p.Until), p.Namespace,
		p.After != nil, afterAt, afterTask, afterSeq, jsonStrings(types), p.TaskType, p.Queue, limit)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "scan events")
	}
	defer rows.Close()
	page := make([]store.AuditEvent, 0, limit)
	for rows.Next() {
		e, err := scanAuditEvent(rows)
		if err != nil {
			return nil, err
		}
		page = append(page, e)
	}
	return page, errors.Wrap(interpret(rows.Err()), "scan events")
}

func scanAuditEvent(row scanner) (store.AuditEvent, error) {
	var (
		e                            store.AuditEvent
		taskID, typ, data, status    string
		at                           int64
		traceID, labels, fairnessKey sql.NullString
	)
	err := row.Scan(&taskID, &e.Event.Seq, &typ, &at, &e.Event.Attempt, &data,
		&e.Namespace, &e.TaskType, &e.TypeVersion, &e.Queue, &status, &traceID, &labels, &fairnessKey)
	if err != nil {
		return store.AuditEvent{}, err
	}
	if e.TaskID, err = uuid.Parse(taskID); err != nil {
		return store.AuditEvent{}, err
	}
	ev, err := plan.DecodeEvent(e.Event.Seq, history.Type(typ), fromUS(at), e.Event.Attempt, []byte(data))
	if err != nil {
		return store.AuditEvent{}, errors.Wrapf(err, "task %s", e.TaskID)
	}
	e.Event, e.Data = ev, json.RawMessage(data)
	e.Status, e.TraceID, e.FairnessKey = history.Status(status), traceID.String, fairnessKey.String
	if labels.Valid {
		if err := json.Unmarshal([]byte(labels.String), &e.Labels); err != nil {
			return store.AuditEvent{}, errors.Wrapf(err, "decode labels of task %s", e.TaskID)
		}
	}
	return e, nil
}

// IndexSummarize implements [store.Store]: SQLite has no range indexes
// (the events' times have a B-tree, events_at_idx), so there is nothing
// to summarize.
func (s *Store) IndexSummarize(ctx context.Context) (int, error) { return 0, nil }
