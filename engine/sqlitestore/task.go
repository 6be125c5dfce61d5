package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// taskColumns are the columns scanTask reads, in its order.
const taskColumns = `id, namespace, queue, type, type_version, status, priority, run_at,
	attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
	idempotency_key, trace_id, input, output, last_error, cancel_requested,
	last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
	fairness_key, fairness_weight`

type scanner interface{ Scan(dest ...any) error }

// scanTask reads a row of taskColumns, then into extra the columns
// selected after them.
func scanTask(row scanner, extra ...any) (*store.Task, error) {
	var (
		t                                         store.Task
		id, status                                string
		leaseOwner, idemKey, traceID, fairnessKey sql.NullString
		input, output, lastError, labels          sql.NullString
		runAt, createdAt, updatedAt               int64
		leaseExpires, startedAt, finishedAt       sql.NullInt64
		deadline, startDeadline, fairnessWeight   sql.NullInt64
		cancelRequested                           bool
	)
	err := row.Scan(append([]any{&id, &t.Namespace, &t.Queue, &t.Type, &t.TypeVersion, &status, &t.Priority, &runAt,
		&t.Attempt, &t.MaxAttempts, &leaseOwner, &t.LeaseEpoch, &leaseExpires,
		&idemKey, &traceID, &input, &output, &lastError, &cancelRequested,
		&t.LastSeq, &createdAt, &updatedAt, &startedAt, &finishedAt, &labels, &deadline, &startDeadline,
		&fairnessKey, &fairnessWeight}, extra...)...)
	if err != nil {
		return nil, err
	}
	if t.ID, err = uuid.Parse(id); err != nil {
		return nil, errors.Wrapf(err, "task id %q", id)
	}
	t.Status = history.Status(status)
	t.RunAt, t.CreatedAt, t.UpdatedAt = fromUS(runAt), fromUS(createdAt), fromUS(updatedAt)
	t.LeaseOwner, t.IdempotencyKey, t.TraceID, t.FairnessKey = leaseOwner.String, idemKey.String, traceID.String, fairnessKey.String
	t.FairnessWeight = int(fairnessWeight.Int64)
	t.LeaseExpiresAt, t.StartedAt, t.FinishedAt = timePtr(leaseExpires), timePtr(startedAt), timePtr(finishedAt)
	t.Deadline, t.StartDeadline = timePtr(deadline), timePtr(startDeadline)
	t.CancelRequest = cancelRequested
	if input.Valid {
		t.Input = json.RawMessage(input.String)
	}
	if output.Valid {
		t.Output = json.RawMessage(output.String)
	}
	if lastError.Valid {
		t.LastError = new(history.ErrorInfo)
		if err := json.Unmarshal([]byte(lastError.String), t.LastError); err != nil {
			return nil, errors.Wrapf(err, "decode last_error of task %s", t.ID)
		}
	}
	if labels.Valid {
		if err := json.Unmarshal([]byte(labels.String), &t.Labels); err != nil {
			return nil, errors.Wrapf(err, "decode labels of task %s", t.ID)
		}
	}
	return &t, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func queryTasks(ctx context.Context, q querier, query string, args ...any) ([]*store.Task, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []*store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, interpret(rows.Err())
}

// TaskStart implements [store.Store].
func (s *Store) TaskStart(ctx context.Context, p *store.TaskStartParams) (store.TaskStartResult, error) {
	res, err := s.TaskStartMany(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return res[0], nil
}

// TaskStartMany implements [store.Store]: the tasks and their
// task_scheduled events in one transaction; a start whose idempotency key
// is taken returns the task that took it.
func (s *Store) TaskStartMany(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]store.TaskStartResult, len(ps))
	err := s.tx(ctx, func(tx *txn) error {
		now := s.now()
		planned := make([]plan.StartPlan, len(ps))
		for i, p := range ps {
			var err error
			if planned[i], err = plan.Start(p, now); err != nil {
				return errors.Wrapf(err, "start task %d", i)
			}
		}
		if err := checkCapacity(ctx, tx, planned, now); err != nil {
			return err
		}
		for i, pl := range planned {
			res, err := insertTask(ctx, tx, pl, now)
			if err != nil {
				return errors.Wrapf(err, "start task %d", i)
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.announce(store.Notification{Ready: true})
	return out, nil
}

// startTaskTx starts one task at now inside tx (the cron firer's).
func startTaskTx(ctx context.Context, tx *txn, p *store.TaskStartParams, now time.Time) (store.TaskStartResult, error) {
	pl, err := plan.Start(p, now)
	if err != nil {
		return store.TaskStartResult{}, err
	}
	if err := checkCapacity(ctx, tx, []plan.StartPlan{pl}, now); err != nil {
		return store.TaskStartResult{}, err
	}
	return insertTask(ctx, tx, pl, now)
}

func insertTask(ctx context.Context, tx *txn, pl plan.StartPlan, now time.Time) (store.TaskStartResult, error) {
	sc := pl.Scheduled
	if sc.IdempotencyKey != "" {
		var existing string
		err := tx.QueryRowContext(ctx, "SELECT id FROM tasks WHERE namespace = ? AND idempotency_key = ?",
			sc.Namespace, sc.IdempotencyKey).Scan(&existing)
		switch {
		case err == nil:
			id, err := uuid.Parse(existing)
			return store.TaskStartResult{ID: id, Existing: true}, err
		case !errors.Is(err, sql.ErrNoRows):
			return store.TaskStartResult{}, interpret(err)
		}
	}
	fairAt, err := placeFair(ctx, tx, sc)
	if err != nil {
		return store.TaskStartResult{}, err
	}
	var weight sql.NullInt64
	if sc.FairnessWeight > 0 {
		weight = sql.NullInt64{Int64: int64(sc.FairnessWeight), Valid: true}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tasks (id, namespace, queue, type, type_version, status, priority, run_at,
		attempt, max_attempts, idempotency_key, trace_id, input, labels, deadline, start_deadline,
		fairness_key, fairness_weight, fair_at, last_seq, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`,
		pl.ID.String(), sc.Namespace, sc.Queue, sc.TaskType, sc.TypeVersion, sc.Priority, us(sc.RunAt),
		sc.MaxAttempts, nullString(sc.IdempotencyKey), nullString(sc.TraceID), nullBytes(sc.Input), nullBytes(pl.Labels),
		nullUS(sc.Deadline), nullUS(sc.StartDeadline), nullString(sc.FairnessKey), weight, us(fairAt), us(now), us(now))
	if err != nil {
		return store.TaskStartResult{}, interpret(err)
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO events (task_id, seq, type, at, attempt, data) VALUES (?, 1, ?, ?, 0, ?)",
		pl.ID.String(), string(history.TaskScheduled), us(now), string(pl.Data))
	if err != nil {
		return store.TaskStartResult{}, interpret(err)
	}
	return store.TaskStartResult{ID: pl.ID}, nil
}

// placeFair is the task's virtual start time: its run time without a
// fairness key; with one, a quantum (over its weight) after the last
// waiting task of its key (see docs/architecture.md, "Fairness keys").
func placeFair(ctx context.Context, tx *txn, sc history.TaskScheduledData) (time.Time, error) {
	if sc.FairnessKey == "" {
		return sc.RunAt, nil
	}
	var last sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT max(fair_at) FROM tasks WHERE namespace = ? AND queue = ? AND fairness_key = ?
		AND status IN ('pending', 'retrying')`, sc.Namespace, sc.Queue, sc.FairnessKey).Scan(&last)
	if err != nil || !last.Valid {
		return sc.RunAt, interpret(err)
	}
	step := store.FairnessQuantum / time.Duration(max(sc.FairnessWeight, 1))
	return later(sc.RunAt, fromUS(last.Int64).Add(step)), nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkCapacity refuses a start that would take a bounded queue past its
// maximum of waiting tasks. The write lock is held, so no other start can
// slip in between the count and the insert.
func checkCapacity(ctx context.Context, tx *txn, planned []plan.StartPlan, now time.Time) error {
	adding := map[[2]string]int{}
	for _, pl := range planned {
		adding[[2]string{pl.Scheduled.Namespace, pl.Scheduled.Queue}]++
	}
	for key, n := range adding {
		var maxWaiting sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT max_waiting FROM queues WHERE namespace = ? AND name = ?", key[0], key[1]).Scan(&maxWaiting)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !maxWaiting.Valid) {
			continue
		}
		if err != nil {
			return interpret(err)
		}
		var waiting int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM tasks WHERE namespace = ? AND queue = ? AND status IN ('pending', 'retrying')",
			key[0], key[1]).Scan(&waiting); err != nil {
			return interpret(err)
		}
		if waiting+n <= int(maxWaiting.Int64) {
			continue
		}
		// The mean age of the running attempts, since the tasks' first
		// starts (an overestimate for retries), as PostgreSQL's hint.
		var running int
		var meanStartedAt sql.NullFloat64
		if err := tx.QueryRowContext(ctx, "SELECT count(*), avg(started_at) FROM tasks WHERE namespace = ? AND queue = ? AND status = 'running'",
			key[0], key[1]).Scan(&running, &meanStartedAt); err != nil {
			return interpret(err)
		}
		var meanAge time.Duration
		if meanStartedAt.Valid {
			meanAge = time.Duration(float64(us(now))-meanStartedAt.Float64) * time.Microsecond
		}
		need := waiting + n - int(maxWaiting.Int64)
		return &store.QueueFullError{Namespace: key[0], Queue: key[1], Waiting: waiting, MaxWaiting: int(maxWaiting.Int64),
			Adding: n, RetryAfter: plan.QueueFullRetryAfter(need, running, meanAge)}
	}
	return nil
}

// TaskGetByID implements [store.Store].
func (s *Store) TaskGetByID(ctx context.Context, namespace string, id uuid.UUID) (*store.Task, error) {
	t, err := scanTask(s.q.QueryRowContext(ctx, "SELECT "+taskColumns+" FROM tasks WHERE id = ? AND namespace = ?", id.String(), namespace))
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "get task %s", id)
	}
	return t, nil
}

// idChunk bounds the ids of one IN (…) list, far below SQLite's limit of
// bound parameters.
const idChunk = 500

// TaskGetManyByID implements [store.Store].
func (s *Store) TaskGetManyByID(ctx context.Context, ids []uuid.UUID) ([]*store.Task, error) {
	var out []*store.Task
	for start := 0; start < len(ids); start += idChunk {
		part := ids[start:min(start+idChunk, len(ids))]
		tasks, err := queryTasks(ctx, s.q, "SELECT "+taskColumns+" FROM tasks WHERE id IN ("+placeholders(len(part))+") ORDER BY id", idArgs(part)...)
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	return out, nil
}

func idArgs(ids []uuid.UUID) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// TaskList implements [store.Store]: newest first.
func (s *Store) TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	where, args := []string{"namespace = ?"}, []any{p.Namespace}
	for _, f := range []struct{ col, val string }{{"status", string(p.Status)}, {"type", p.Type}, {"queue", p.Queue}} {
		if f.val != "" {
			where, args = append(where, f.col+" = ?"), append(args, f.val)
		}
	}
	if p.Before != uuid.Nil {
		where, args = append(where, "id < ?"), append(args, p.Before.String())
	}
	tasks, err := queryTasks(ctx, s.q, "SELECT "+taskColumns+" FROM tasks WHERE "+strings.Join(where, " AND ")+
		" ORDER BY id DESC LIMIT ?", append(args, limit)...)
	return tasks, errors.Wrap(err, "list tasks")
}

// TaskIDListAll implements [store.Store].
func (s *Store) TaskIDListAll(ctx context.Context) ([]uuid.UUID, error) {
	return queryIDs(ctx, s.q, "SELECT id FROM tasks ORDER BY id")
}

func queryIDs(ctx context.Context, q querier, query string, args ...any) ([]uuid.UUID, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, interpret(rows.Err())
}

// EventListByTask implements [store.Store].
func (s *Store) EventListByTask(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	return listEvents(ctx, s.q, id)
}

func listEvents(ctx context.Context, q querier, id uuid.UUID) ([]history.Event, error) {
	all, err := queryEvents(ctx, q, "SELECT task_id, seq, type, at, attempt, data FROM events WHERE task_id = ? ORDER BY seq", id.String())
	return all[id], err
}

// EventListByTasks implements [store.Store].
func (s *Store) EventListByTasks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error) {
	out := map[uuid.UUID][]history.Event{}
	for start := 0; start < len(ids); start += idChunk {
		part := ids[start:min(start+idChunk, len(ids))]
		events, err := queryEvents(ctx, s.q, "SELECT task_id, seq, type, at, attempt, data FROM events WHERE task_id IN ("+
			placeholders(len(part))+") ORDER BY task_id, seq", idArgs(part)...)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, events)
	}
	return out, nil
}

func queryEvents(ctx context.Context, q querier, query string, args ...any) (map[uuid.UUID][]history.Event, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	out := map[uuid.UUID][]history.Event{}
	for rows.Next() {
		var (
			taskID, typ, data string
			seq, at           int64
			attempt           int
		)
		if err := rows.Scan(&taskID, &seq, &typ, &at, &attempt, &data); err != nil {
			return nil, err
		}
		id, err := uuid.Parse(taskID)
		if err != nil {
			return nil, err
		}
		ev, err := plan.DecodeEvent(seq, typ, fromUS(at), attempt, []byte(data))
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", id)
		}
		out[id] = append(out[id], ev)
	}
	return out, interpret(rows.Err())
}
