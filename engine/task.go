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
	Labels         map[string]string
	Deadline       *time.Time // the schedule-to-close deadline, if any
	StartDeadline  *time.Time // the latest first start, if any
	FairnessKey    string     // who the task is for, shared round robin
	FairnessWeight int        // the key's turns against weight 1; 0 when none
}

// FairnessQuantum is how far a keyed task's virtual start time (fair_at)
// is placed after the last waiting task of its key, over its weight. A key
// with n tasks waiting has its next one n quanta out, so a fresh key's task,
// placed at its run time, goes ahead of all but the first of another key's
// backlog started a quantum or more before. Large against the time between
// claims, so order among keys is round robin rather than arrival order.
const FairnessQuantum = time.Second

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
func (s *PGStore) TaskStart(ctx context.Context, p *TaskStartParams) (TaskStartResult, error) {
	res, err := s.taskStartMany(ctx, s.pool, []*TaskStartParams{p})
	if err != nil {
		return TaskStartResult{}, err
	}
	return res[0], nil
}

// TaskStartTx is [Store.TaskStart] inside the caller's transaction (the
// outbox): the task exists if and only if tx commits, and workers are
// notified on commit.
func (s *PGStore) TaskStartTx(ctx context.Context, tx pgx.Tx, p *TaskStartParams) (TaskStartResult, error) {
	res, err := s.taskStartMany(ctx, tx, []*TaskStartParams{p})
	if err != nil {
		return TaskStartResult{}, err
	}
	return res[0], nil
}

// TaskStartMany is [Store.TaskStart] for many tasks in one statement (plus
// one lookup per idempotency key found taken). Results are in the order of
// ps.
func (s *PGStore) TaskStartMany(ctx context.Context, ps []*TaskStartParams) ([]TaskStartResult, error) {
	return s.taskStartMany(ctx, s.pool, ps)
}

// TaskStartManyTx is [Store.TaskStartMany] inside the caller's transaction.
func (s *PGStore) TaskStartManyTx(ctx context.Context, tx pgx.Tx, ps []*TaskStartParams) ([]TaskStartResult, error) {
	return s.taskStartMany(ctx, tx, ps)
}

func (s *PGStore) taskStartMany(ctx context.Context, q Querier, ps []*TaskStartParams) ([]TaskStartResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	// Which queues are bounded, asked before the clock is read: created_at
	// should be as close to the commit as it can be.
	lookupNS, lookupQueues := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		lookupNS[i], lookupQueues[i] = p.Namespace, p.Scheduled.Queue
	}
	bounded, err := s.boundedQueues(ctx, q, "QueueBounded", lookupNS, lookupQueues)
	if err != nil {
		return nil, err
	}
	now := Now()
	n := len(ps)
	var (
		ids                            = make([][16]byte, n)
		namespaces, queues, types      = make([]string, n), make([]string, n), make([]string, n)
		versions, priorities, attempts = make([]int32, n), make([]int32, n), make([]int32, n)
		runAts                         = make([]time.Time, n)
		idemKeys, traceIDs, inputs     = make([]*string, n), make([]*string, n), make([]*string, n)
		labels                         = make([]*string, n)
		deadlines, startDeadlines      = make([]*time.Time, n), make([]*time.Time, n)
		fairnessKeys                   = make([]*string, n)
		fairnessWeights                = make([]*int32, n)
		datas                          = make([]string, n)
	)
	for i, p := range ps {
		planned, err := PlanStart(p, now)
		if err != nil {
			return nil, errors.Wrapf(err, "start task %d", i)
		}
		sched := planned.Scheduled
		ids[i] = planned.ID
		deadlines[i], startDeadlines[i] = sched.Deadline, sched.StartDeadline
		namespaces[i], queues[i], types[i] = sched.Namespace, sched.Queue, sched.TaskType
		versions[i], priorities[i], attempts[i] = int32(sched.TypeVersion), int32(sched.Priority), int32(sched.MaxAttempts)
		runAts[i] = sched.RunAt
		idemKeys[i], traceIDs[i], inputs[i] = nullString(sched.IdempotencyKey), nullString(sched.TraceID), nullJSONString(sched.Input)
		datas[i] = string(planned.Data)
		fairnessKeys[i] = nullString(sched.FairnessKey)
		if sched.FairnessWeight > 0 {
			fairnessWeights[i] = ptr(int32(sched.FairnessWeight))
		}
		labels[i] = nullJSONString(planned.Labels)
	}
	args := pgx.NamedArgs{
		"ids": ids, "namespaces": namespaces, "queues": queues, "types": types, "type_versions": versions,
		"priorities": priorities, "run_ats": runAts, "max_attempts": attempts, "idempotency_keys": idemKeys,
		"trace_ids": traceIDs, "inputs": inputs, "labels": labels, "deadlines": deadlines, "start_deadlines": startDeadlines,
		"fairness_keys": fairnessKeys, "fairness_weights": fairnessWeights, "fairness_quantum": FairnessQuantum.Seconds(), "datas": datas, "at": now, "channel": s.channel,
	}
	if len(bounded) == 0 {
		return s.insertTasks(ctx, q, args, ids, namespaces, idemKeys)
	}
	// A bounded queue: lock its row, count what waits, and insert, in one
	// transaction (the caller's, or one of our own).
	var out []TaskStartResult
	insert := func(tx pgx.Tx) error {
		var err error
		if err = s.checkCapacity(ctx, tx, namespaces, queues); err != nil {
			return err
		}
		out, err = s.insertTasks(ctx, tx, args, ids, namespaces, idemKeys)
		return err
	}
	if tx, ok := q.(pgx.Tx); ok {
		return out, insert(tx)
	}
	return out, pgx.BeginFunc(ctx, s.pool, insert)
}

// PlannedStart is a task start worked out before anything is written.
type PlannedStart struct {
	ID        uuid.UUID         // a new UUIDv7
	Scheduled history.Scheduled // the task_scheduled payload: namespace set, times normalized, run time defaulted to now
	Data      []byte            // Scheduled, encoded
	Labels    []byte            // Scheduled.Labels as JSON; nil when none
}

// PlanStart checks and encodes a start at now: what every store does
// before it writes a task. A payload that could never be replayed is
// refused here, before anything is written.
func PlanStart(p *TaskStartParams, now time.Time) (PlannedStart, error) {
	sched := p.Scheduled
	sched.Namespace = p.Namespace
	if sched.Namespace == "" {
		return PlannedStart{}, errors.New("namespace is empty")
	}
	if sched.RunAt.IsZero() {
		sched.RunAt = now
	}
	sched.RunAt = normalizeTime(sched.RunAt)
	if sched.Deadline != nil {
		d := normalizeTime(*sched.Deadline)
		sched.Deadline = &d
	}
	if sched.StartDeadline != nil {
		d := normalizeTime(*sched.StartDeadline)
		sched.StartDeadline = &d
	}
	if _, err := history.Apply(history.State{}, history.Event{Seq: 1, At: now, Data: sched}); err != nil {
		return PlannedStart{}, err
	}
	data, err := history.Encode(sched)
	if err != nil {
		return PlannedStart{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return PlannedStart{}, errors.Wrap(err, "new task id")
	}
	out := PlannedStart{ID: id, Scheduled: sched, Data: data}
	if len(sched.Labels) > 0 {
		if out.Labels, err = json.Marshal(sched.Labels); err != nil {
			return PlannedStart{}, errors.Wrap(err, "encode labels")
		}
	}
	return out, nil
}

// insertTasks runs TaskInsertMany with args and looks up the tasks holding
// the idempotency keys that were taken.
func (s *PGStore) insertTasks(ctx context.Context, q Querier, args pgx.NamedArgs, ids [][16]byte, namespaces []string, idemKeys []*string) ([]TaskStartResult, error) {
	n := len(ids)
	rows, err := q.Query(ctx, s.sql("TaskInsertMany"), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "start tasks")
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "start tasks")
	}
	created := make(map[[16]byte]bool, len(inserted))
	for _, id := range inserted {
		created[id] = true
	}
	out := make([]TaskStartResult, n)
	for i := range ids {
		if created[ids[i]] {
			out[i] = TaskStartResult{ID: uuid.UUID(ids[i])}
			continue
		}
		// The key was taken, by an earlier task or one of this batch; this
		// statement runs after ours, so it sees the winner.
		var existing uuid.UUID
		err := q.QueryRow(ctx, s.sql("TaskIDByIdempotencyKey"), pgx.NamedArgs{
			"namespace": namespaces[i], "idempotency_key": deref(idemKeys[i]),
		}).Scan(&existing)
		if err != nil {
			return nil, errors.Wrapf(interpretError(err), "look up the task holding idempotency key of start %d", i)
		}
		out[i] = TaskStartResult{ID: existing, Existing: true}
	}
	return out, nil
}

// TaskGetByID returns the task with id in namespace, or an error marked
// [ErrNotFound].
func (s *PGStore) TaskGetByID(ctx context.Context, namespace string, id uuid.UUID) (*Task, error) {
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
	Queue     string
	Before    uuid.UUID // only tasks older than this one (ids are UUIDv7); zero: from the newest
	Limit     int       // default 100
}

// TaskList returns tasks newest first.
func (s *PGStore) TaskList(ctx context.Context, p *TaskListParams) ([]*Task, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql("TaskList"), pgx.NamedArgs{
		"namespace": p.Namespace, "status": string(p.Status), "type": p.Type, "queue": p.Queue,
		"paged": p.Before != uuid.Nil, "before": p.Before, "max": limit,
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(interpretError(err), "list tasks")
}

// TaskIDListAll returns the id of every task in the schema, in every
// namespace. It exists for checks over a whole (test) database.
func (s *PGStore) TaskIDListAll(ctx context.Context) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, s.sql("TaskIDListAll"))
	if err != nil {
		return nil, errors.Wrap(err, "list task ids")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return ids, errors.Wrap(err, "list task ids")
}

// TaskGetManyByID returns the tasks with the given ids, in any namespace.
func (s *PGStore) TaskGetManyByID(ctx context.Context, ids []uuid.UUID) ([]*Task, error) {
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
		fairnessKey                  *string
		fairnessWeight               *int
		input, output, lastError     []byte
		labels                       []byte
		status                       string
	)
	dest := []any{(*[16]byte)(&t.ID), &t.Namespace, &t.Queue, &t.Type, &t.TypeVersion, &status, &t.Priority,
		&t.RunAt, &t.Attempt, &t.MaxAttempts, &leaseOwner, &t.LeaseEpoch, &t.LeaseExpiresAt,
		&idemKey, &traceID, &input, &output, &lastError, &t.CancelRequest, &t.LastSeq,
		&t.CreatedAt, &t.UpdatedAt, &t.StartedAt, &t.FinishedAt, &labels, &t.Deadline, &t.StartDeadline,
		&fairnessKey, &fairnessWeight}
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	t.Status = history.Status(status)
	t.LeaseOwner, t.IdempotencyKey, t.TraceID = deref(leaseOwner), deref(idemKey), deref(traceID)
	t.FairnessKey, t.FairnessWeight = deref(fairnessKey), deref(fairnessWeight)
	t.Input, t.Output = input, output
	if lastError != nil {
		t.LastError = new(history.ErrorInfo)
		if err := json.Unmarshal(lastError, t.LastError); err != nil {
			return nil, errors.Wrapf(err, "decode last_error of task %s", t.ID)
		}
	}
	if labels != nil {
		if err := json.Unmarshal(labels, &t.Labels); err != nil {
			return nil, errors.Wrapf(err, "decode labels of task %s", t.ID)
		}
	}
	t.normalize()
	return &t, nil
}

func (t *Task) normalize() {
	t.RunAt, t.CreatedAt, t.UpdatedAt = t.RunAt.UTC(), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	for _, p := range []**time.Time{&t.LeaseExpiresAt, &t.StartedAt, &t.FinishedAt, &t.Deadline, &t.StartDeadline} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
}

// EventListByTask returns a task's events in order, decoded.
func (s *PGStore) EventListByTask(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	byTask, err := s.eventsQuery(ctx, s.pool, s.sql("EventListByTask"), pgx.NamedArgs{"task_id": id})
	if err != nil {
		return nil, errors.Wrapf(err, "list events of task %s", id)
	}
	return byTask[id], nil
}

// EventListByTasks returns the events of several tasks, by task id.
func (s *PGStore) EventListByTasks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error) {
	byTask, err := s.eventsQuery(ctx, s.pool, s.sql("EventListByTasks"), pgx.NamedArgs{"ids": ids})
	return byTask, errors.Wrap(err, "list events")
}

func (s *PGStore) eventsQuery(ctx context.Context, q Querier, sql string, args pgx.NamedArgs) (map[uuid.UUID][]history.Event, error) {
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

// DecodeEvent decodes a stored event: its payload from the versioned JSON,
// its times in UTC at the stored precision. What every store does with the
// rows of its event log.
func DecodeEvent(seq int64, typ string, at time.Time, attempt int, data []byte) (history.Event, error) {
	payload, err := history.Decode(history.Type(typ), data)
	if err != nil {
		return history.Event{}, errors.Wrapf(err, "event %d", seq)
	}
	return history.Event{Seq: seq, At: normalizeTime(at), Attempt: attempt, Data: normalizePayload(payload)}, nil
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

// deref returns *p, or the zero value when p is nil (a NULL column).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
