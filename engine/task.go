package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Task is a task's projection row: the state its event log replays to, plus
// its identity and the live lease expiry.
type Task struct {
	ID             uuid.UUID
	Namespace      string
	Queue          string
	Type           string
	TypeVersion    int
	Status         history.Status
	Priority       int
	RunAt          time.Time
	Attempt        int
	MaxAttempts    int
	LeaseOwner     string
	LeaseEpoch     int64
	LeaseExpiresAt *time.Time // extended by heartbeats; nil when not running
	IdempotencyKey string
	TraceID        string
	Input          json.RawMessage
	Output         json.RawMessage
	LastError      *history.ErrorInfo
	CancelRequest  bool
	LastSeq        int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
}

// TaskStartParams describes a task to start.
type TaskStartParams struct {
	Namespace string
	// Scheduled is the task_scheduled payload. Its Namespace is overwritten
	// with the Namespace above.
	Scheduled history.Scheduled
}

// TaskStartResult says which task a start refers to.
type TaskStartResult struct {
	ID uuid.UUID
	// Existing is true when the idempotency key was already taken and ID is
	// the task that took it; nothing was created.
	Existing bool
}

// TaskStart persists a new task: the projection row and task_scheduled in one
// statement, committed before it returns, with a notification to workers. A
// second start with an idempotency key already used in the namespace creates
// nothing and returns the existing task's id.
func (s *Store) TaskStart(ctx context.Context, p *TaskStartParams) (TaskStartResult, error) {
	return s.taskStart(ctx, s.pool, p)
}

// TaskStartTx is [Store.TaskStart] inside the caller's transaction (the
// outbox): the task exists if and only if tx commits, and workers are
// notified on commit.
func (s *Store) TaskStartTx(ctx context.Context, tx pgx.Tx, p *TaskStartParams) (TaskStartResult, error) {
	return s.taskStart(ctx, tx, p)
}

func (s *Store) taskStart(ctx context.Context, q Querier, p *TaskStartParams) (TaskStartResult, error) {
	sched := p.Scheduled
	sched.Namespace = p.Namespace
	if sched.Namespace == "" {
		return TaskStartResult{}, errors.New("start task: namespace is empty")
	}
	now := Now()
	if sched.RunAt.IsZero() {
		sched.RunAt = now
	}
	sched.RunAt = normalizeTime(sched.RunAt)
	// Refuse what could never be replayed, before anything is written.
	if _, err := history.Apply(history.State{}, history.Event{Seq: 1, At: now, Data: sched}); err != nil {
		return TaskStartResult{}, errors.Wrap(err, "start task")
	}
	data, err := history.Encode(sched)
	if err != nil {
		return TaskStartResult{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return TaskStartResult{}, errors.Wrap(err, "new task id")
	}
	args := pgx.NamedArgs{
		"id": id, "namespace": sched.Namespace, "queue": sched.Queue, "type": sched.TaskType,
		"type_version": sched.TypeVersion, "priority": sched.Priority, "run_at": sched.RunAt,
		"max_attempts": sched.MaxAttempts, "idempotency_key": nullString(sched.IdempotencyKey),
		"trace_id": nullString(sched.TraceID), "input": nullJSON(sched.Input), "at": now,
		"data": data, "channel": s.channel,
	}
	for {
		var got uuid.UUID
		err = q.QueryRow(ctx, s.sql("TaskInsert"), args).Scan(&got)
		if err == nil {
			return TaskStartResult{ID: got}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return TaskStartResult{}, errors.Wrapf(interpretError(err), "start task of type %s", sched.TaskType)
		}
		// The key is taken. The row that took it is visible to a new
		// statement unless it was deleted since, in which case try again.
		err = q.QueryRow(ctx, s.sql("TaskIDByIdempotencyKey"), pgx.NamedArgs{
			"namespace": sched.Namespace, "idempotency_key": sched.IdempotencyKey,
		}).Scan(&got)
		if err == nil {
			return TaskStartResult{ID: got, Existing: true}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return TaskStartResult{}, errors.Wrap(interpretError(err), "look up idempotency key")
		}
		if err := ctx.Err(); err != nil {
			return TaskStartResult{}, err
		}
	}
}

// TaskGetByID returns the task with id in namespace, or an error marked
// [ErrNotFound].
func (s *Store) TaskGetByID(ctx context.Context, namespace string, id uuid.UUID) (*Task, error) {
	rows, err := s.pool.Query(ctx, s.sql("TaskGetByID"), pgx.NamedArgs{"id": id, "namespace": namespace})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "get task %s", id)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "get task %s", id)
	}
	return t, nil
}

// TaskListParams filters [Store.TaskList]. Empty strings match everything.
type TaskListParams struct {
	Namespace string
	Status    history.Status
	Type      string
	Limit     int // default 100
}

// TaskList returns tasks newest first.
func (s *Store) TaskList(ctx context.Context, p *TaskListParams) ([]*Task, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql("TaskList"), pgx.NamedArgs{
		"namespace": p.Namespace, "status": string(p.Status), "type": p.Type, "max": limit,
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(interpretError(err), "list tasks")
}

// TaskIDListAll returns the id of every task in the schema, in every
// namespace. It exists for checks over a whole (test) database.
func (s *Store) TaskIDListAll(ctx context.Context) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, s.sql("TaskIDListAll"))
	if err != nil {
		return nil, errors.Wrap(err, "list task ids")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return ids, errors.Wrap(err, "list task ids")
}

// TaskGetManyByID returns the tasks with the given ids, in any namespace.
func (s *Store) TaskGetManyByID(ctx context.Context, ids []uuid.UUID) ([]*Task, error) {
	rows, err := s.pool.Query(ctx, s.sql("TaskGetManyByID"), pgx.NamedArgs{"ids": ids})
	if err != nil {
		return nil, errors.Wrap(err, "get tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(err, "get tasks")
}

func scanTask(row pgx.CollectableRow) (*Task, error) { return scanTaskWith(row) }

// scanTaskWith scans the task columns, in the order the queries list them,
// followed by extra columns into extra.
func scanTaskWith(row pgx.CollectableRow, extra ...any) (*Task, error) {
	var (
		t                            Task
		leaseOwner, idemKey, traceID *string
		input, output, lastError     []byte
		status                       string
	)
	dest := []any{&t.ID, &t.Namespace, &t.Queue, &t.Type, &t.TypeVersion, &status, &t.Priority,
		&t.RunAt, &t.Attempt, &t.MaxAttempts, &leaseOwner, &t.LeaseEpoch, &t.LeaseExpiresAt,
		&idemKey, &traceID, &input, &output, &lastError, &t.CancelRequest, &t.LastSeq,
		&t.CreatedAt, &t.UpdatedAt, &t.StartedAt, &t.FinishedAt}
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	t.Status = history.Status(status)
	t.LeaseOwner, t.IdempotencyKey, t.TraceID = deref(leaseOwner), deref(idemKey), deref(traceID)
	t.Input, t.Output = input, output
	if lastError != nil {
		t.LastError = new(history.ErrorInfo)
		if err := json.Unmarshal(lastError, t.LastError); err != nil {
			return nil, errors.Wrapf(err, "decode last_error of task %s", t.ID)
		}
	}
	t.normalize()
	return &t, nil
}

func (t *Task) normalize() {
	t.RunAt, t.CreatedAt, t.UpdatedAt = t.RunAt.UTC(), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	for _, p := range []**time.Time{&t.LeaseExpiresAt, &t.StartedAt, &t.FinishedAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
}

// EventListByTask returns a task's events in order, decoded.
func (s *Store) EventListByTask(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	byTask, err := s.eventsQuery(ctx, s.pool, s.sql("EventListByTask"), pgx.NamedArgs{"task_id": id})
	if err != nil {
		return nil, errors.Wrapf(err, "list events of task %s", id)
	}
	return byTask[id], nil
}

// EventListByTasks returns the events of several tasks, by task id.
func (s *Store) EventListByTasks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error) {
	byTask, err := s.eventsQuery(ctx, s.pool, s.sql("EventListByTasks"), pgx.NamedArgs{"ids": ids})
	return byTask, errors.Wrap(err, "list events")
}

func (s *Store) eventsQuery(ctx context.Context, q Querier, sql string, args pgx.NamedArgs) (map[uuid.UUID][]history.Event, error) {
	rows, err := q.Query(ctx, sql, args)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[uuid.UUID][]history.Event{}
	for rows.Next() {
		var (
			taskID uuid.UUID
			ev     history.Event
			typ    string
			data   []byte
		)
		if err := rows.Scan(&taskID, &ev.Seq, &typ, &ev.At, &ev.Attempt, &data); err != nil {
			return nil, err
		}
		ev.At = ev.At.UTC()
		if ev.Data, err = history.Decode(history.Type(typ), data); err != nil {
			return nil, errors.Wrapf(err, "task %s event %d", taskID, ev.Seq)
		}
		ev.Data = normalizePayload(ev.Data)
		out[taskID] = append(out[taskID], ev)
	}
	return out, rows.Err()
}

// Now is the engine's clock for event times: UTC, truncated to the
// microsecond PostgreSQL stores, so a time read back equals the one written.
// Leases do not use it; they use the database clock.
func Now() time.Time { return normalizeTime(time.Now()) }

func normalizeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullJSON(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TaskStartMany is [Store.TaskStart] for many tasks in one statement.
// Results are in the order of ps.
func (s *Store) TaskStartMany(ctx context.Context, ps []*TaskStartParams) ([]TaskStartResult, error) {
	out := make([]TaskStartResult, len(ps))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for i, p := range ps {
			r, err := s.taskStart(ctx, tx, p)
			if err != nil {
				return err
			}
			out[i] = r
		}
		return nil
	})
	return out, err
}
