package pgstore

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// eventScanArgs checks p and turns it into the statement's arguments and
// the page size.
func eventScanArgs(p *store.EventScanParams) (pgx.NamedArgs, int, error) {
	limit, since, err := plan.EventScanBounds(p)
	if err != nil {
		return nil, 0, err
	}
	var after store.EventCursor
	if p.After != nil {
		after = *p.After
	}
	types := make([]string, len(p.EventTypes))
	for i, t := range p.EventTypes {
		types[i] = string(t)
	}
	return pgx.NamedArgs{
		"namespace": p.Namespace, "since": since, "until": p.Until,
		"paged": p.After != nil, "after_at": after.At, "after_task_id": after.TaskID, "after_seq": after.Seq,
		"event_types": types, "task_type": p.TaskType, "queue": p.Queue, "max": limit,
	}, limit, nil
}

func scanAuditEvent(row pgx.CollectableRow) (store.AuditEvent, error) {
	var (
		e                    store.AuditEvent
		typ, status          string
		traceID, fairnessKey *string
		data, labels         []byte // into json.RawMessage, pgx would check the JSON again
	)
	err := row.Scan(&e.TaskID, &e.Event.Seq, &typ, &e.Event.At, &e.Event.Attempt, &data,
		&e.Namespace, &e.TaskType, &e.TypeVersion, &e.Queue, &status, &traceID, &labels, &fairnessKey)
	if err != nil {
		return store.AuditEvent{}, err
	}
	e.Event.At, e.Data = e.Event.At.UTC(), data
	payload, err := history.Decode(history.Type(typ), data)
	if err != nil {
		return store.AuditEvent{}, errors.Wrapf(interpretError(err), "task %s event %d", e.TaskID, e.Event.Seq)
	}
	e.Event.Data = plan.NormalizePayload(payload)
	e.Status, e.TraceID, e.FairnessKey = history.Status(status), deref(traceID), deref(fairnessKey)
	if labels != nil {
		if err := json.Unmarshal(labels, &e.Labels); err != nil {
			return store.AuditEvent{}, errors.Wrapf(interpretError(err), "decode labels of task %s", e.TaskID)
		}
	}
	return e, nil
}

// scanClaimed reads a claimed task's row and earlier events, adds the
// attempt_started the claim appended (rebuilt from the row, as the
// statement's snapshot cannot see it), and replays them.
func scanClaimed(row pgx.CollectableRow) (*store.ClaimedTask, error) {
	var (
		seqs     []int64
		types    []string
		ats      []time.Time
		attempts []int32
		datas    []string
	)
	t, err := scanTaskWith(row, &seqs, &types, &ats, &attempts, &datas)
	if err != nil {
		return nil, err
	}
	if len(seqs) != len(types) || len(seqs) != len(ats) || len(seqs) != len(attempts) || len(seqs) != len(datas) {
		return nil, errors.AssertionFailedf("claimed task %s: event columns of different lengths", t.ID)
	}
	events := make([]history.Event, 0, len(seqs)+2)
	if len(seqs) == 0 && t.LastSeq == 2 {
		// A fresh task: its history before this claim is task_scheduled
		// alone, and the row holds everything in it.
		events = append(events, history.Event{Seq: 1, At: t.CreatedAt, Data: plan.ScheduledFromRow(t)})
	}
	for i := range seqs {
		data, err := history.Decode(history.Type(types[i]), []byte(datas[i]))
		if err != nil {
			return &store.ClaimedTask{Task: t, Err: errors.Wrapf(interpretError(err), "task %s event %d", t.ID, seqs[i])}, nil
		}
		events = append(events, history.Event{Seq: seqs[i], At: ats[i].UTC(), Attempt: int(attempts[i]), Data: plan.NormalizePayload(data)})
	}
	if t.LeaseExpiresAt == nil {
		return nil, errors.AssertionFailedf("claimed task %s has no lease expiry", t.ID)
	}
	if int64(len(events)) != t.LastSeq-1 {
		// Read short (see errStaleClaimRead): read again after the commit.
		return &store.ClaimedTask{Task: t, Err: errStaleClaimRead}, nil
	}
	events = append(events, history.Event{Seq: t.LastSeq, At: t.UpdatedAt, Attempt: t.Attempt, Data: history.AttemptStartedData{
		WorkerID: t.LeaseOwner, LeaseEpoch: t.LeaseEpoch, LeaseExpiresAt: *t.LeaseExpiresAt,
	}})
	state, err := history.Replay(events)
	if err != nil {
		return &store.ClaimedTask{Task: t, Err: errors.Wrapf(interpretError(err), "replay claimed task %s", t.ID)}, nil
	}
	return &store.ClaimedTask{Task: t, Events: events, State: state}, nil
}

type boundedQueue struct {
	namespace, name string
	maxWaiting      int
}

func nullPositive(n int) *int32 {
	if n <= 0 {
		return nil
	}
	v := int32(n)
	return &v
}

func scanSchedule(row pgx.CollectableRow) (store.Schedule, error) {
	var sc store.Schedule
	var input []byte
	var reason *string
	err := row.Scan(&sc.Namespace, &sc.Name, &sc.Cron, &sc.Timezone, &sc.TaskType, &sc.TypeVersion, &sc.Queue, &input,
		&sc.MaxAttempts, &sc.Paused, &sc.NextRunAt, &sc.LastTick, &sc.RetryAt, &sc.LastSkippedAt, &reason)
	sc.Input, sc.LastSkipReason = input, deref(reason)
	sc.NextRunAt = sc.NextRunAt.UTC()
	sc.RetryAt, sc.LastSkippedAt = utcPtr(sc.RetryAt), utcPtr(sc.LastSkippedAt)
	return sc, err
}

// utcPtr returns *t in UTC, or nil (a NULL column).
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func scanTask(row pgx.CollectableRow) (*store.Task, error) { return scanTaskWith(row) }

// scanTaskWith scans the task columns, in the order the queries list them,
// followed by extra columns into extra.
func scanTaskWith(row pgx.CollectableRow, extra ...any) (*store.Task, error) {
	// The row and the columns that need converting share one allocation:
	// each local the scan points into would be one of its own (a claim
	// scans a thousand rows at a time).
	sc := new(taskScan)
	t := &sc.task
	dest := append(sc.dest[:0], (*[16]byte)(&t.ID), &t.Namespace, &t.Queue, &t.Type, &t.TypeVersion, &sc.status, &t.Priority,
		&t.RunAt, &t.Attempt, &t.MaxAttempts, &sc.leaseOwner, &t.LeaseEpoch, &t.LeaseExpiresAt,
		&sc.idemKey, &sc.traceID, &sc.input, &sc.output, &sc.lastError, &t.CancelRequest, &t.LastSeq,
		&t.CreatedAt, &t.UpdatedAt, &t.StartedAt, &t.FinishedAt, &sc.labels, &t.Deadline, &t.StartDeadline,
		&sc.fairnessKey, &sc.fairnessWeight, &sc.parentID, &sc.parentPosition)
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	t.Status = history.Status(sc.status)
	t.LeaseOwner, t.IdempotencyKey, t.TraceID = deref(sc.leaseOwner), deref(sc.idemKey), deref(sc.traceID)
	t.FairnessKey, t.FairnessWeight = deref(sc.fairnessKey), deref(sc.fairnessWeight)
	t.ParentID, t.ParentPosition = deref(sc.parentID), deref(sc.parentPosition)
	t.Input, t.Output = sc.input, sc.output
	if sc.lastError != nil {
		t.LastError = new(history.ErrorInfo)
		if err := json.Unmarshal(sc.lastError, t.LastError); err != nil {
			return nil, errors.Wrapf(interpretError(err), "decode last_error of task %s", t.ID)
		}
	}
	if sc.labels != nil {
		if err := json.Unmarshal(sc.labels, &t.Labels); err != nil {
			return nil, errors.Wrapf(interpretError(err), "decode labels of task %s", t.ID)
		}
	}
	normalizeTask(t)
	sc.dest = [taskColumns + maxExtraColumns]any{} // the returned task keeps sc alive: drop the pointers into it
	return t, nil
}

// taskColumns is how many columns scanTaskWith reads; maxExtraColumns,
// how many more a caller's extra may add without the scan allocating.
const (
	taskColumns     = 31
	maxExtraColumns = 7
)

// taskScan is one row's scan: the task, the column values that need
// converting, and the scan's destinations.
type taskScan struct {
	task                                      store.Task
	leaseOwner, idemKey, traceID, fairnessKey *string
	fairnessWeight, parentPosition            *int
	parentID                                  *[16]byte
	input, output, lastError, labels          []byte
	status                                    string
	dest                                      [taskColumns + maxExtraColumns]any
}

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

// TaskStart persists a new task: the projection row and task_scheduled in one
// statement, committed before it returns, with a notification to workers. A
// second start with an idempotency key already used in the namespace creates
// nothing and returns the existing task's id.
func (s *Store) TaskStart(ctx context.Context, p *store.TaskStartParams) (store.TaskStartResult, error) {
	res, err := s.taskStartMany(ctx, s.db, []*store.TaskStartParams{p})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return res[0], nil
}

// TaskStartMany is [Store.TaskStart] for many tasks in one statement (plus
// one lookup per idempotency key found taken). Results are in the order of
// ps.
func (s *Store) TaskStartMany(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	return s.taskStartMany(ctx, s.db, ps)
}

func (s *Store) taskStartMany(ctx context.Context, q querier, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	now := s.now()
	n := len(ps)
	var (
		// (The arrays of scalars every task sets are encoded without an
		// allocation per element: arrays.go.)
		ids                            = make(uuidArray, n)
		namespaces, queues, types      = make(textArray, n), make(textArray, n), make(textArray, n)
		versions, priorities, attempts = make(int4Array, n), make(int4Array, n), make(int4Array, n)
		runAts                         = make(timeArray, n)
		idemKeys, traceIDs, inputs     = make([]*string, n), make([]*string, n), make([]*string, n)
		labels                         = make([]*string, n)
		deadlines, startDeadlines      = make([]*time.Time, n), make([]*time.Time, n)
		fairnessKeys                   = make([]*string, n)
		fairnessWeights                = make([]*int32, n)
		parentIDs                      = make([]*[16]byte, n)
		parentPositions                = make([]*int32, n)
		dataKeys                       = make([][]byte, n)
		datas                          = make([]string, n)
		plans                          = make([]plan.StartPlan, n)
		refuseReuse                    = false // a start refuses its key's reuse: compare, in a transaction
	)
	for i, p := range ps {
		planned, err := plan.Start(p, now)
		if err != nil {
			return nil, errors.Wrapf(interpretError(err), "start task %d", i)
		}
		plans[i] = planned
		refuseReuse = refuseReuse || (p.RefuseKeyReuse && p.Scheduled.IdempotencyKey != "")
		sched := planned.Scheduled
		ids[i] = uuidElem(planned.ID)
		deadlines[i], startDeadlines[i] = sched.Deadline, sched.StartDeadline
		namespaces[i], queues[i], types[i] = textElem(sched.Namespace), textElem(sched.Queue), textElem(sched.TaskType)
		versions[i], priorities[i], attempts[i] = int4Elem(sched.TypeVersion), int4Elem(sched.Priority), int4Elem(sched.MaxAttempts)
		runAts[i] = timeElem(sched.RunAt)
		idemKeys[i], traceIDs[i], inputs[i] = nullString(sched.IdempotencyKey), nullString(sched.TraceID), nullJSONString(sched.Input)
		if datas[i], err = scheduledData(sched, planned.Data); err != nil {
			return nil, errors.Wrapf(err, "start task %d", i)
		}
		fairnessKeys[i] = nullString(sched.FairnessKey)
		if sched.FairnessWeight > 0 {
			fairnessWeights[i] = ptr(int32(sched.FairnessWeight))
		}
		labels[i] = nullJSONString(planned.Labels)
		dataKeys[i] = planned.DataKey
		if sched.ParentID != "" {
			parent, err := uuid.Parse(sched.ParentID)
			if err != nil {
				return nil, errors.Wrapf(err, "start task %d: parent id", i)
			}
			parentIDs[i], parentPositions[i] = (*[16]byte)(&parent), ptr(int32(sched.ParentPosition))
		}
	}
	// A lone start (Start) runs TaskInsertOne, a plain statement of its
	// values; a batch, TaskInsertMany, of arrays.
	query, args := "TaskInsertMany", pgx.NamedArgs{
		"ids": ids, "namespaces": namespaces, "queues": queues, "types": types, "type_versions": versions,
		"priorities": priorities, "run_ats": runAts, "max_attempts": attempts, "idempotency_keys": idemKeys,
		"trace_ids": traceIDs, "inputs": inputs, "labels": labels, "deadlines": deadlines, "start_deadlines": startDeadlines,
		"fairness_keys": fairnessKeys, "fairness_weights": fairnessWeights, "datas": datas,
		"parent_ids": parentIDs, "parent_positions": parentPositions, "data_keys": dataKeys,
	}
	if n == 1 {
		query, args = "TaskInsertOne", pgx.NamedArgs{
			"id": [16]byte(ids[0]), "namespace": string(namespaces[0]), "queue": string(queues[0]), "type": string(types[0]),
			"type_version": int32(versions[0]), "priority": int32(priorities[0]), "run_at": time.Time(runAts[0]),
			"max_attempts": int32(attempts[0]), "idempotency_key": idemKeys[0],
			"trace_id": traceIDs[0], "input": inputs[0], "labels": labels[0], "deadline": deadlines[0], "start_deadline": startDeadlines[0],
			"fairness_key": fairnessKeys[0], "fairness_weight": fairnessWeights[0], "data": datas[0],
			"parent_id": parentIDs[0], "parent_position": parentPositions[0], "data_key": dataKeys[0],
		}
	}
	args["fairness_quantum"], args["at"], args["channel"] = store.FairnessQuantum.Seconds(), now, s.channel
	if keyed := keyedIDs(plans); len(keyed) > 0 {
		args["keyed_ids"] = keyed
	}
	// A removal retiring a key while the start ran refuses it
	// (errKeyRetiredMidStart, refuse_retired_keys); the next try sees the
	// retired key. Two tries are enough unless removals of the same key
	// keep racing it, which a key removed once cannot.
	for try := 1; ; try++ {
		out, err := s.startOnce(ctx, q, query, args, plans, refuseReuse, now)
		if !errors.Is(err, errKeyRetiredMidStart) {
			return out, err
		}
		if try == 3 {
			return nil, errmark.Mark(errors.Wrap(err, "start tasks: try again"), store.ErrRetryable)
		}
	}
}

// startOnce inserts the starts of plans with one try of query and args.
func (s *Store) startOnce(ctx context.Context, q querier, query string, args pgx.NamedArgs, plans []plan.StartPlan, refuseReuse bool, now time.Time) ([]store.TaskStartResult, error) {
	tx, inCallersTx := q.(pgx.Tx)
	// In a caller's transaction a keyed start's re-check, if it refuses,
	// must roll back the start alone: a savepoint.
	guard := inCallersTx && args["keyed_ids"] != nil
	if !refuseReuse {
		// One statement, unless a queue of the batch is bounded.
		args["unbounded_only"] = true
		var out []store.TaskStartResult
		var err error
		if guard {
			err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				out, err = s.insertTasks(ctx, sp, query, args, plans)
				return err
			})
		} else {
			out, err = s.insertTasks(ctx, q, query, args, plans)
		}
		if !errors.Is(err, errBoundedQueue) {
			return out, err
		}
	}
	// A bounded queue: lock its row, count what waits, and insert, in one
	// transaction (the caller's, or one of our own). A start refusing its
	// key's reuse: insert, then compare with the tasks holding the keys,
	// in a transaction a refusal rolls back (in the caller's, a savepoint).
	args["unbounded_only"] = false
	var out []store.TaskStartResult
	insert := func(tx pgx.Tx) error {
		var err error
		if err = s.checkCapacity(ctx, tx, plans, now); err != nil {
			return err
		}
		out, err = s.insertTasks(ctx, tx, query, args, plans)
		return err
	}
	if inCallersTx {
		if !refuseReuse && !guard {
			return out, insert(tx)
		}
		return out, pgx.BeginFunc(ctx, tx, insert)
	}
	return out, pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, insert)
}

// keyedIDs returns the ids of the starts of plans that have an idempotency
// key: the tasks whose keys the re-check after the insert looks up.
func keyedIDs(plans []plan.StartPlan) [][16]byte {
	var ids [][16]byte
	for _, pl := range plans {
		if pl.Scheduled.IdempotencyKey != "" {
			ids = append(ids, pl.ID)
		}
	}
	return ids
}

// errBoundedQueue is insertTasks' answer to a batch, inserted with
// unbounded_only, that writes to a bounded queue: nothing was inserted.
var errBoundedQueue = errors.New("the start writes to a bounded queue")

// errKeyRetiredMidStart is insertTasks' answer when a removal retired a key
// the start took, committing while the insert waited on the row it
// deleted (refuse_retired_keys, SQLSTATE CRN01): the start was rolled back.
var errKeyRetiredMidStart = errors.New("an idempotency key of the start was retired while it ran")

// batchSender is a pool (the store's own db), which runs a batch as one
// implicit transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// insertTasks runs query (TaskInsertMany, or TaskInsertOne for one start)
// with args (the starts of plans) and looks
// up the tasks holding the idempotency keys that were taken, refusing a
// start that sets RefuseKeyReuse and is not the start that took its key.
func (s *Store) insertTasks(ctx context.Context, q querier, query string, args pgx.NamedArgs, plans []plan.StartPlan) ([]store.TaskStartResult, error) {
	n := len(plans)
	var inserted []*[16]byte
	collect := func(rows pgx.Rows) error {
		var err error
		inserted, err = pgx.CollectRows(rows, pgx.RowTo[*[16]byte])
		return err
	}
	var err error
	_, inTx := q.(pgx.Tx)
	if pool, ok := q.(batchSender); ok && !inTx {
		// Outside a caller's transaction the insert runs its generic plan
		// (a custom plan took 0.7-0.8 ms to make for one task, more than
		// the insert itself), in a pipeline that is one implicit
		// transaction, so the settings end with it.
		// A keyed start re-checks its keys in the same transaction, which
		// must be READ COMMITTED whatever the connection's default: the
		// re-check needs a snapshot of its own (a transaction left open by
		// a refusal is never reused: the pool drops such a connection).
		keyed := args["keyed_ids"]
		batch := &pgx.Batch{}
		if keyed != nil {
			batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		}
		batch.Queue("SELECT " + genericPlanSettings)
		batch.Queue(s.sql(query), args).Query(collect)
		if blobs := startBlobs(plans, args["at"]); blobs != nil {
			batch.Queue(s.sql("BlobInsertForStarted"), blobs)
		}
		if keyed != nil {
			batch.Queue(s.sql("RetiredKeysRecheck"), pgx.NamedArgs{"ids": keyed, "at": args["at"]})
			batch.Queue("COMMIT")
		}
		err = pool.SendBatch(ctx, batch).Close()
	} else {
		var rows pgx.Rows
		if rows, err = q.Query(ctx, s.sql(query), args); err == nil {
			err = collect(rows)
		}
		if blobs := startBlobs(plans, args["at"]); err == nil && blobs != nil {
			_, err = q.Exec(ctx, s.sql("BlobInsertForStarted"), blobs)
		}
		if keyed := args["keyed_ids"]; err == nil && keyed != nil {
			_, err = q.Exec(ctx, s.sql("RetiredKeysRecheck"), pgx.NamedArgs{"ids": keyed, "at": args["at"]})
		}
	}
	if isKeyRetiredMidStart(err) {
		return nil, errors.WithStack(errKeyRetiredMidStart)
	}
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "start tasks")
	}
	created := make(map[[16]byte]bool, len(inserted))
	for _, id := range inserted {
		if id == nil {
			return nil, errBoundedQueue
		}
		created[*id] = true
	}
	out := make([]store.TaskStartResult, n)
	for i, pl := range plans {
		if created[pl.ID] {
			out[i] = store.TaskStartResult{ID: pl.ID}
			continue
		}
		// The key was taken, by an earlier task or one of this batch; this
		// statement runs after ours, so it sees the winner.
		var existing uuid.UUID
		var holder plan.KeyHolder
		var parentID *uuid.UUID
		var parentPosition *int32
		err := q.QueryRow(ctx, s.sql("TaskIDByIdempotencyKey"), pgx.NamedArgs{
			"namespace": pl.Scheduled.Namespace, "idempotency_key": pl.Scheduled.IdempotencyKey, "at": args["at"],
		}).Scan(&existing, &holder.Type, &holder.Input, &holder.InputDigest, &holder.Removed, &parentID, &parentPosition)
		if err != nil {
			return nil, errors.Wrapf(interpretError(err), "look up the task holding idempotency key of start %d", i)
		}
		if parentID != nil && parentPosition != nil {
			holder.ParentID, holder.ParentPosition = parentID.String(), int(*parentPosition)
		}
		if err := plan.CheckHolder(holder, pl.Scheduled, pl.RefuseKeyReuse); err != nil {
			return nil, errors.Wrapf(err, "start task %d", i)
		}
		out[i] = store.TaskStartResult{ID: existing, Existing: true}
	}
	return out, nil
}

// TaskGet returns the task p names (by id, or by idempotency key) in
// p.Namespace, or an error marked [ErrNotFound].
func (s *Store) TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error) {
	byID, err := plan.CheckTaskGet(p)
	if err != nil {
		return nil, err
	}
	query, args := "TaskGetByKey", pgx.NamedArgs{"namespace": p.Namespace, "idempotency_key": p.IdempotencyKey}
	if byID {
		query, args = "TaskGetByID", pgx.NamedArgs{"id": p.ID, "namespace": p.Namespace}
	}
	rows, err := s.db.Query(ctx, s.sql(query), args)
	if err == nil {
		var t *store.Task
		if t, err = pgx.CollectExactlyOneRow(rows, scanTask); err == nil {
			return t, nil
		}
	}
	return nil, plan.TaskGetError(interpretError(err), p)
}

// TaskList returns tasks newest first: every column (TaskList), none of
// the payload columns (TaskListLean), or the payloads asked for within
// p.MaxPayloadBytes (TaskListPayloads).
func (s *Store) TaskList(ctx context.Context, p *store.TaskListParams) ([]*store.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	args := pgx.NamedArgs{
		"namespace": p.Namespace, "status": string(p.Status), "type": p.Type, "queue": p.Queue,
		"paged": p.Before != uuid.Nil, "before": p.Before, "max": limit,
	}
	query := "TaskList"
	switch {
	case p.OmitInput && p.OmitOutput:
		query = "TaskListLean"
	case p.OmitInput || p.OmitOutput || p.MaxPayloadBytes > 0:
		query = "TaskListPayloads"
		args["with_input"], args["with_output"] = !p.OmitInput, !p.OmitOutput
		args["max_bytes"] = int64(math.MaxInt64)
		if p.MaxPayloadBytes > 0 {
			args["max_bytes"] = int64(p.MaxPayloadBytes)
		}
	}
	rows, err := s.db.Query(ctx, s.sql(query), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(interpretError(err), "list tasks")
}

// TaskGetMany returns the tasks of p.IDs, of p.Namespace or, when it is
// "", of any.
func (s *Store) TaskGetMany(ctx context.Context, p *store.TaskGetManyParams) ([]*store.Task, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	rows, err := s.db.Query(ctx, s.sql("TaskGetMany"), pgx.NamedArgs{"ids": p.IDs, "namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "get tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(interpretError(err), "get tasks")
}

// EventList returns the events of the tasks of p.After after a seq each,
// by task id, decoded, in the cheapest statement for the case: without a
// namespace, one task's whole log by task_id (EventListByTask), several
// whole logs by task_id = ANY (EventListByTasks), and logs after a seq by
// the primary key from (id, seq) pairs (EventListAfter), the statements
// the processor's reads have always run; with one, the pairs joined to the
// tasks of the namespace (EventListAfterIn).
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) (map[uuid.UUID][]history.Event, error) {
	if len(p.After) == 0 {
		return map[uuid.UUID][]history.Event{}, nil
	}
	ids := make([]uuid.UUID, 0, len(p.After))
	afters := make([]int64, 0, len(p.After))
	whole := true
	for id, seq := range p.After {
		ids, afters = append(ids, id), append(afters, seq)
		whole = whole && seq <= 0
	}
	var (
		query = "EventListAfter"
		args  = pgx.NamedArgs{"ids": ids, "afters": afters}
	)
	switch {
	case p.Namespace != "":
		query, args["namespace"] = "EventListAfterIn", p.Namespace
	case whole && len(ids) == 1:
		query, args = "EventListByTask", pgx.NamedArgs{"task_id": ids[0]}
	case whole:
		query, args = "EventListByTasks", pgx.NamedArgs{"ids": ids}
	}
	byTask, err := s.eventsQuery(ctx, s.db, s.sql(query), args)
	if err != nil {
		if len(ids) == 1 {
			return nil, errors.Wrapf(interpretError(err), "list events of task %s", ids[0])
		}
		return nil, errors.Wrap(interpretError(err), "list events")
	}
	return byTask, nil
}

func (s *Store) eventsQuery(ctx context.Context, q querier, sql string, args pgx.NamedArgs) (map[uuid.UUID][]history.Event, error) {
	rows, err := q.Query(ctx, sql, args)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var groups plan.EventGroups
	var (
		taskID    uuid.UUID
		seq       int64
		at        time.Time
		attempt   int
		typ, data pgtype.DriverBytes // read in place: Decode copies what it keeps
	)
	for rows.Next() {
		if err := rows.Scan(&taskID, &seq, &typ, &at, &attempt, &data); err != nil {
			return nil, err
		}
		ev, err := plan.DecodeEvent(seq, plan.EventType(typ), at, attempt, data)
		if err != nil {
			return nil, errors.Wrapf(interpretError(err), "task %s", taskID)
		}
		groups.Add(taskID, ev)
	}
	return groups.ByTask(), rows.Err()
}

// TaskTypeRegister records p.Types (all of p.Namespace) as registered by
// p.Worker. A type already registered takes these defaults.
func (s *Store) TaskTypeRegister(ctx context.Context, p *store.TaskTypeRegisterParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	types := p.Types
	n := len(types)
	if n == 0 {
		return nil
	}
	names, queues := make([]string, n), make([]string, n)
	versions, attempts := make([]int32, n), make([]int32, n)
	scheduleToClose := make([]*int64, n)
	signals := make([]*string, n)
	for i, t := range types {
		names[i], queues[i], versions[i], attempts[i] = t.Type, t.Queue, int32(t.Version), int32(t.MaxAttempts)
		if t.ScheduleToClose > 0 {
			scheduleToClose[i] = ptr(t.ScheduleToClose.Milliseconds())
		}
		declared, err := plan.SignalDeclarations(t.Signals)
		if err != nil {
			return err
		}
		signals[i] = declared
	}
	_, err := s.db.Exec(ctx, s.sql("TaskTypeRegister"), pgx.NamedArgs{
		"namespace": p.Namespace, "registered_by": p.Worker, "types": names, "versions": versions,
		"queues": queues, "max_attempts": attempts, "schedule_to_close_ms": scheduleToClose, "signals": signals,
	})
	return errors.Wrap(interpretError(err), "register task types")
}

// TaskTypeList returns the task types registered in p.Namespace, by name
// and version.
func (s *Store) TaskTypeList(ctx context.Context, p *store.TaskTypeListParams) ([]store.TaskType, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("TaskTypeList"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list task types")
	}
	types, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TaskType, error) {
		var t store.TaskType
		var scheduleToCloseMS *int64
		var signals []byte // jsonb as text: pgx would decode it into maps
		err := row.Scan(&t.Namespace, &t.Type, &t.Version, &t.Queue, &t.MaxAttempts, &scheduleToCloseMS, &t.RegisteredBy,
			&t.RegisteredAt, &signals)
		if err != nil {
			return t, err
		}
		t.ScheduleToClose = time.Duration(deref(scheduleToCloseMS)) * time.Millisecond
		t.RegisteredAt = t.RegisteredAt.UTC()
		t.Signals, err = plan.ReadSignalDeclarations(signals)
		return t, errors.Wrapf(err, "task type %s@%d", t.Type, t.Version)
	})
	return types, errors.Wrap(interpretError(err), "list task types")
}

// normalizeTask puts a scanned row's times in UTC.
func normalizeTask(t *store.Task) {
	t.RunAt, t.CreatedAt, t.UpdatedAt = t.RunAt.UTC(), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	for _, p := range []**time.Time{&t.LeaseExpiresAt, &t.StartedAt, &t.FinishedAt, &t.Deadline, &t.StartDeadline} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
}

// inputSentOnce is the input size from which a start sends its input once:
// as the row's, left out of task_scheduled's data, which the insert
// statement puts it back into. `cairn bench throughput --input-bytes N`:
// with 4 KB inputs inserts ran 30 % faster (5,700 → 7,400 starts/s), with
// 1 KB 16 % (16,200 → 18,800), with 300 B no faster; with an 11-byte input
// the second encoding and the merge cost more than they saved (45,000 →
// 42,000), so smaller inputs go inside the data as before.
const inputSentOnce = 512

// scheduledData is task_scheduled's data as the insert statement takes it:
// data (the whole payload, encoded), or for an input of inputSentOnce bytes
// or more the payload without its input. jsonb keeps an object's keys in
// its own order, so the stored event is the same either way.
func scheduledData(sched history.TaskScheduledData, data []byte) (string, error) {
	if len(sched.Input) < inputSentOnce {
		return string(data), nil
	}
	sched.Input = nil
	lean, err := history.Encode(sched)
	return string(lean), err
}

// startBlobs are the arguments of BlobInsertForStarted for the blobs of
// plans, nil when they have none.
func startBlobs(plans []plan.StartPlan, at any) pgx.NamedArgs {
	var namespaces, keys []string
	var taskIDs [][16]byte
	var contentTypes, locations []*string
	var sizes []int64
	var sums, datas [][]byte
	for _, pl := range plans {
		for _, b := range pl.Blobs {
			namespaces, keys, taskIDs = append(namespaces, b.Namespace), append(keys, b.Key), append(taskIDs, b.TaskID)
			contentTypes, sizes = append(contentTypes, nullString(b.ContentType)), append(sizes, b.Length())
			sums, datas = append(sums, b.SHA256), append(datas, blobData(b.Data))
			locations = append(locations, nullString(b.Location))
		}
	}
	if keys == nil {
		return nil
	}
	return pgx.NamedArgs{"namespaces": namespaces, "keys": keys, "task_ids": taskIDs, "content_types": contentTypes,
		"sizes": sizes, "sha256s": sums, "datas": datas, "locations": locations, "at": at}
}

// EventListPage implements [store.Store]. The rows are read one at a
// time, and the page ends at its byte bound: the rest of the statement's
// rows are discarded as they arrive, never held.
func (s *Store) EventListPage(ctx context.Context, p *store.EventPageParams) ([]history.Event, error) {
	limit, maxBytes, err := plan.EventPageBounds(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("EventListPage"), pgx.NamedArgs{
		"task_id": p.TaskID, "namespace": p.Namespace, "after": p.After, "limit": limit,
	})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "list events of task %s", p.TaskID)
	}
	defer rows.Close()
	var (
		out       []history.Event
		bytes     int64
		seq       int64
		at        time.Time
		attempt   int
		typ, data pgtype.DriverBytes // read in place: Decode copies what it keeps
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &typ, &at, &attempt, &data); err != nil {
			return nil, errors.Wrapf(interpretError(err), "list events of task %s", p.TaskID)
		}
		if plan.PageFull(len(out), bytes, int64(len(data)), maxBytes) {
			break
		}
		bytes += int64(len(data))
		ev, err := plan.DecodeEvent(seq, plan.EventType(typ), at, attempt, data)
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", p.TaskID)
		}
		out = append(out, ev)
	}
	rows.Close()
	return out, errors.Wrapf(interpretError(rows.Err()), "list events of task %s", p.TaskID)
}
