package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// taskColumns are the columns scanTask reads, in its order: the
// /* TASK_COLUMNS */ of the query files.
const taskColumns = `id, namespace, queue, type, type_version, status, priority, run_at,
	attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
	idempotency_key, trace_id, input, output, last_error, cancel_requested,
	last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
	fairness_key, fairness_weight, parent_id, parent_position`

// taskColumnsLean is taskColumns with NULL for the input and output: the
// listings that do not show payloads do not read them.
const taskColumnsLean = `id, namespace, queue, type, type_version, status, priority, run_at,
	attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
	idempotency_key, trace_id, NULL AS input, NULL AS output, last_error, cancel_requested,
	last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
	fairness_key, fairness_weight, parent_id, parent_position`

// taskColumnsPicked is taskColumns of tasks AS t, with the input and
// output only where parameters ?7 and ?8 ask for them (TaskListPayloads).
const taskColumnsPicked = `t.id, t.namespace, t.queue, t.type, t.type_version, t.status, t.priority, t.run_at,
	t.attempt, t.max_attempts, t.lease_owner, t.lease_epoch, t.lease_expires_at,
	t.idempotency_key, t.trace_id, CASE WHEN ?7 THEN t.input END AS input, CASE WHEN ?8 THEN t.output END AS output,
	t.last_error, t.cancel_requested,
	t.last_seq, t.created_at, t.updated_at, t.started_at, t.finished_at, t.labels, t.deadline, t.start_deadline,
	t.fairness_key, t.fairness_weight, t.parent_id, t.parent_position`

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
		parentID                                  sql.NullString
		parentPosition                            sql.NullInt64
	)
	err := row.Scan(append([]any{&id, &t.Namespace, &t.Queue, &t.Type, &t.TypeVersion, &status, &t.Priority, &runAt,
		&t.Attempt, &t.MaxAttempts, &leaseOwner, &t.LeaseEpoch, &leaseExpires,
		&idemKey, &traceID, &input, &output, &lastError, &cancelRequested,
		&t.LastSeq, &createdAt, &updatedAt, &startedAt, &finishedAt, &labels, &deadline, &startDeadline,
		&fairnessKey, &fairnessWeight, &parentID, &parentPosition}, extra...)...)
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
	if parentID.Valid {
		if t.ParentID, err = uuid.Parse(parentID.String); err != nil {
			return nil, errors.Wrapf(err, "parent id %q of task %s", parentID.String, id)
		}
		t.ParentPosition = int(parentPosition.Int64)
	}
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

// querier runs the named queries: the store's statement cache outside a
// transaction, a *txn inside one.
type querier interface {
	query(ctx context.Context, name string, args ...any) (*sql.Rows, error)
	queryRow(ctx context.Context, name string, args ...any) *sql.Row
	exec(ctx context.Context, name string, args ...any) (sql.Result, error)
}

func queryTasks(ctx context.Context, q querier, name string, args ...any) ([]*store.Task, error) {
	rows, err := q.query(ctx, name, args...)
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
	var out []store.TaskStartResult
	err := s.tx(ctx, func(tx *txn) error {
		now := s.now()
		planned, err := planStarts(ps, now)
		if err != nil {
			return err
		}
		out, err = startPlanned(ctx, tx, planned, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.announce(store.Notification{Ready: true})
	return out, nil
}

// planStarts plans the starts ps at now (see [plan.Start]).
func planStarts(ps []*store.TaskStartParams, now time.Time) ([]plan.StartPlan, error) {
	planned := make([]plan.StartPlan, len(ps))
	for i, p := range ps {
		var err error
		if planned[i], err = plan.Start(p, now); err != nil {
			return nil, errors.Wrapf(err, "start task %d", i)
		}
	}
	return planned, nil
}

// startPlanned writes the planned starts inside tx. The idempotency keys
// come first: a start whose key is taken returns the task holding it, and
// only the starts that would make a task count against a bounded queue's
// capacity, so a retried start into a full queue still finds its task.
func startPlanned(ctx context.Context, tx *txn, planned []plan.StartPlan, now time.Time) ([]store.TaskStartResult, error) {
	out, fresh, err := existingStarts(ctx, tx, planned, now)
	if err != nil {
		return nil, err
	}
	if err := checkCapacity(ctx, tx, fresh, now); err != nil {
		return nil, err
	}
	for i, pl := range planned {
		if out[i].Existing {
			continue
		}
		// A key named twice in the batch: insertTask finds the first's
		// task for the second.
		if out[i], err = insertTask(ctx, tx, pl, now); err != nil {
			return nil, errors.Wrapf(err, "start task %d", i)
		}
	}
	return out, nil
}

// existingStarts returns, in the order of planned, the tasks already
// holding the starts' idempotency keys (Existing set; a start
// RefuseKeyReuse refuses is an error), and the plans of the starts that
// would make a task, a key named twice in the batch once.
func existingStarts(ctx context.Context, tx *txn, planned []plan.StartPlan, now time.Time) ([]store.TaskStartResult, []plan.StartPlan, error) {
	out := make([]store.TaskStartResult, len(planned))
	var fresh []plan.StartPlan
	seen := map[[2]string]bool{} // namespace, key: a key is a namespace's
	for i, pl := range planned {
		key := [2]string{pl.Scheduled.Namespace, pl.Scheduled.IdempotencyKey}
		if key[1] == "" {
			fresh = append(fresh, pl)
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		res, found, err := taskHoldingKey(ctx, tx, pl, now)
		if err != nil {
			return nil, nil, errors.Wrapf(err, "start task %d", i)
		}
		if found {
			out[i] = res
			continue
		}
		fresh = append(fresh, pl)
	}
	return out, fresh, nil
}

// taskHoldingKey looks up the task holding pl's idempotency key at now (a
// task, or one retention removed whose key is still retired); found is
// false when none does. A start refusing its key's reuse that is not the
// start that took the key is refused.
func taskHoldingKey(ctx context.Context, tx *txn, pl plan.StartPlan, now time.Time) (res store.TaskStartResult, found bool, err error) {
	sc := pl.Scheduled
	var existing string
	var holder plan.KeyHolder
	var parentID sql.NullString
	var parentPosition sql.NullInt64
	err = tx.queryRow(ctx, "TaskIDByIdempotencyKey", sc.Namespace, sc.IdempotencyKey, us(now)).
		Scan(&existing, &holder.Type, &holder.Input, &holder.InputDigest, &holder.Removed, &parentID, &parentPosition)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.TaskStartResult{}, false, nil
	case err != nil:
		return store.TaskStartResult{}, false, interpret(err)
	}
	if parentID.Valid && parentPosition.Valid {
		holder.ParentID, holder.ParentPosition = parentID.String, int(parentPosition.Int64)
	}
	if err := plan.CheckHolder(holder, sc, pl.RefuseKeyReuse); err != nil {
		return store.TaskStartResult{}, false, err
	}
	id, err := uuid.Parse(existing)
	return store.TaskStartResult{ID: id, Existing: true}, true, err
}

func insertTask(ctx context.Context, tx *txn, pl plan.StartPlan, now time.Time) (store.TaskStartResult, error) {
	sc := pl.Scheduled
	if sc.IdempotencyKey != "" {
		if res, found, err := taskHoldingKey(ctx, tx, pl, now); err != nil || found {
			return res, err
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
	_, err = tx.exec(ctx, "TaskInsert",
		pl.ID.String(), sc.Namespace, sc.Queue, sc.TaskType, sc.TypeVersion, sc.Priority, us(sc.RunAt),
		sc.MaxAttempts, nullString(sc.IdempotencyKey), nullString(sc.TraceID), nullBytes(sc.Input), nullBytes(pl.Labels),
		nullUS(sc.Deadline), nullUS(sc.StartDeadline), nullString(sc.FairnessKey), weight, us(fairAt),
		nullString(sc.ParentID), parentPosition(sc), us(now), us(now), nullBlob(pl.DataKey))
	if err != nil {
		return store.TaskStartResult{}, interpret(err)
	}
	_, err = tx.exec(ctx, "EventInsertScheduled", pl.ID.String(), string(history.TaskScheduled), us(now), string(pl.Data))
	if err != nil {
		return store.TaskStartResult{}, interpret(err)
	}
	for _, b := range pl.Blobs { // an input kept by reference, with its task
		if _, err := tx.exec(ctx, "BlobInsert", b.Namespace, b.Key, b.TaskID.String(), nullString(b.ContentType),
			b.Length(), b.SHA256, blobData(b.Data), us(now), nullString(b.Location)); err != nil {
			return store.TaskStartResult{}, errors.Wrapf(interpret(err), "blob %s", b.Key)
		}
	}
	return store.TaskStartResult{ID: pl.ID}, nil
}

// placeFair is the task's virtual start time: its run time without a
// fairness key; with one, a quantum (over its weight) after the last
// waiting task of its key (see docs/internals/scheduling.md, "Fairness keys").
func placeFair(ctx context.Context, tx *txn, sc history.TaskScheduledData) (time.Time, error) {
	if sc.FairnessKey == "" {
		return sc.RunAt, nil
	}
	var last sql.NullInt64
	err := tx.queryRow(ctx, "TaskFairAtLast", sc.Namespace, sc.Queue, sc.FairnessKey).Scan(&last)
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
		err := tx.queryRow(ctx, "QueueMaxWaiting", key[0], key[1]).Scan(&maxWaiting)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !maxWaiting.Valid) {
			continue
		}
		if err != nil {
			return interpret(err)
		}
		var waiting int
		if err := tx.queryRow(ctx, "QueueWaitingCount", key[0], key[1]).Scan(&waiting); err != nil {
			return interpret(err)
		}
		if waiting+n <= int(maxWaiting.Int64) {
			continue
		}
		// The mean age of the running attempts, since the tasks' first
		// starts (an overestimate for retries), as PostgreSQL's hint.
		var running int
		var meanStartedAt sql.NullFloat64
		if err := tx.queryRow(ctx, "QueueRunning", key[0], key[1]).Scan(&running, &meanStartedAt); err != nil {
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

// TaskGet implements [store.Store]: by id, or by idempotency key.
func (s *Store) TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error) {
	byID, err := plan.CheckTaskGet(p)
	if err != nil {
		return nil, err
	}
	query, args := "TaskGetByKey", []any{p.Namespace, p.IdempotencyKey}
	if byID {
		query, args = "TaskGetByID", []any{p.ID.String(), p.Namespace}
	}
	t, err := scanTask(s.q.queryRow(ctx, query, args...))
	if err != nil {
		return nil, plan.TaskGetError(interpret(err), p)
	}
	return t, nil
}

// TaskGetMany implements [store.Store]: by id, of p.Namespace or of any
// when it is "". The ids are one parameter (a JSON array), so a list of
// any length is one query, below SQLite's limit of bound parameters.
func (s *Store) TaskGetMany(ctx context.Context, p *store.TaskGetManyParams) ([]*store.Task, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	return queryTasks(ctx, s.q, "TaskGetMany", jsonIDs(p.IDs), p.Namespace)
}

// TaskList implements [store.Store]: newest first, with every column
// (TaskList), none of the payload columns (TaskListLean), or the payloads
// asked for within p.MaxPayloadBytes (TaskListPayloads).
func (s *Store) TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	var before sql.NullString // the first page
	if p.Before != uuid.Nil {
		before = sql.NullString{String: p.Before.String(), Valid: true}
	}
	args := []any{p.Namespace, string(p.Status), p.Type, p.Queue, before, limit}
	query := "TaskList"
	switch {
	case p.OmitInput && p.OmitOutput:
		query = "TaskListLean"
	case p.OmitInput || p.OmitOutput || p.MaxPayloadBytes > 0:
		query = "TaskListPayloads"
		maxBytes := int64(math.MaxInt64)
		if p.MaxPayloadBytes > 0 {
			maxBytes = int64(p.MaxPayloadBytes)
		}
		args = append(args, !p.OmitInput, !p.OmitOutput, maxBytes)
	}
	tasks, err := queryTasks(ctx, s.q, query, args...)
	return tasks, errors.Wrap(err, "list tasks")
}

func queryIDs(ctx context.Context, q querier, name string, args ...any) ([]uuid.UUID, error) {
	rows, err := q.query(ctx, name, args...)
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

func listEvents(ctx context.Context, q querier, id uuid.UUID) ([]history.Event, error) {
	all, err := queryEvents(ctx, q, "EventListByTask", id.String())
	return all[id], err
}

// EventList implements [store.Store], in the cheapest statement for the
// case, as PostgreSQL's: without a namespace, one task's whole log
// (EventListByTask), several whole logs (EventListByTasks, the ids one
// parameter, as TaskGetMany's), or logs after a seq each (EventListAfter,
// the (id, seq) pairs one parameter, a JSON array of pairs); with one,
// the pairs joined to the tasks of the namespace (EventListAfterIn).
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) (map[uuid.UUID][]history.Event, error) {
	if len(p.After) == 0 {
		return map[uuid.UUID][]history.Event{}, nil
	}
	ids := make([]uuid.UUID, 0, len(p.After))
	pairs := make([][2]any, 0, len(p.After))
	whole := true
	for id, seq := range p.After {
		ids, pairs = append(ids, id), append(pairs, [2]any{id.String(), seq})
		whole = whole && seq <= 0
	}
	switch {
	case p.Namespace == "" && whole && len(ids) == 1:
		return queryEvents(ctx, s.q, "EventListByTask", ids[0].String())
	case p.Namespace == "" && whole:
		return queryEvents(ctx, s.q, "EventListByTasks", jsonIDs(ids))
	}
	raw, err := json.Marshal(pairs)
	if err != nil {
		return nil, err
	}
	if p.Namespace != "" {
		return queryEvents(ctx, s.q, "EventListAfterIn", string(raw), p.Namespace)
	}
	return queryEvents(ctx, s.q, "EventListAfter", string(raw))
}

func queryEvents(ctx context.Context, q querier, name string, args ...any) (map[uuid.UUID][]history.Event, error) {
	rows, err := q.query(ctx, name, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var groups plan.EventGroups
	var (
		taskID, typ, data sql.RawBytes // read in place: Decode copies what it keeps
		seq, at           int64
		attempt           int
		id                uuid.UUID
		idText            []byte // taskID's text of the last row, parsed into id
		haveID            bool
	)
	for rows.Next() {
		if err := rows.Scan(&taskID, &seq, &typ, &at, &attempt, &data); err != nil {
			return nil, err
		}
		if !haveID || !bytes.Equal(taskID, idText) {
			if id, err = uuid.ParseBytes(taskID); err != nil {
				return nil, err
			}
			idText, haveID = append(idText[:0], taskID...), true
		}
		ev, err := plan.DecodeEvent(seq, plan.EventType(typ), fromUS(at), attempt, data)
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", id)
		}
		groups.Add(id, ev)
	}
	return groups.ByTask(), interpret(rows.Err())
}

// parentPosition is a child's position among its parent's children, NULL
// for a task that is no child.
func parentPosition(sc history.TaskScheduledData) sql.NullInt64 {
	if sc.ParentID == "" {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(sc.ParentPosition), Valid: true}
}

// EventListPage implements [store.Store], as PostgreSQL's: the page ends
// at its byte bound, the rows after it not read.
func (s *Store) EventListPage(ctx context.Context, p *store.EventPageParams) ([]history.Event, error) {
	limit, maxBytes, err := plan.EventPageBounds(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "EventListPage", p.TaskID.String(), p.Namespace, p.After, limit)
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "list events of task %s", p.TaskID)
	}
	defer rows.Close()
	var (
		out       []history.Event
		bytes     int64
		typ, data sql.RawBytes // read in place: Decode copies what it keeps
		seq, at   int64
		attempt   int
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &typ, &at, &attempt, &data); err != nil {
			return nil, errors.Wrapf(interpret(err), "list events of task %s", p.TaskID)
		}
		if plan.PageFull(len(out), bytes, int64(len(data)), maxBytes) {
			break
		}
		bytes += int64(len(data))
		ev, err := plan.DecodeEvent(seq, plan.EventType(typ), fromUS(at), attempt, data)
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", p.TaskID)
		}
		out = append(out, ev)
	}
	if err := rows.Close(); err != nil {
		return nil, errors.Wrapf(interpret(err), "list events of task %s", p.TaskID)
	}
	return out, errors.Wrapf(interpret(rows.Err()), "list events of task %s", p.TaskID)
}
