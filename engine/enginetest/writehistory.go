package enginetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

// WriteHistory stores events as task id's log in schema, with the task's
// row as the replay of events makes it, by plain INSERTs rather than
// through a store: a task as a store of the schema's shape would have left
// it, for tests of what a migration does to the data already there. events
// must replay (history.Replay); the state they replay to is returned.
func WriteHistory(tb testing.TB, pool *pgxpool.Pool, schema string, id uuid.UUID, events []history.Event) history.State {
	tb.Helper()
	st, err := history.Replay(events)
	require.NoError(tb, err, "task %s: the history must replay", id)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }

	batch := &pgx.Batch{}
	var historyBytes int64
	for _, e := range events {
		data, err := history.Encode(e.Data)
		require.NoError(tb, err, "task %s, event %d", id, e.Seq)
		historyBytes += int64(len(data))
		batch.Queue("INSERT INTO "+table("events")+" (task_id, seq, type, at, attempt, data) VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
			id, e.Seq, string(e.Type()), e.At, e.Attempt, string(data))
	}

	sc := st.Scheduled
	var leaseOwner, leaseExpires any
	if st.Lease.Owner != "" {
		leaseOwner, leaseExpires = st.Lease.Owner, st.Lease.ExpiresAt
	}
	var parentID, parentPosition any
	if sc.ParentID != "" {
		parent, err := uuid.Parse(sc.ParentID)
		require.NoError(tb, err, "task %s: parent id", id)
		parentID, parentPosition = parent, sc.ParentPosition
	}
	var fairnessWeight any
	if sc.FairnessWeight > 0 {
		fairnessWeight = sc.FairnessWeight
	}
	batch.Queue(`INSERT INTO `+table("tasks")+` (id, namespace, queue, type, type_version, status, priority,
		run_at, fair_at, attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at, idempotency_key,
		trace_id, input, output, last_error, cancel_requested, last_seq, created_at, updated_at, started_at,
		finished_at, labels, deadline, start_deadline, fairness_key, fairness_weight, parent_id,
		parent_position, history_bytes)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12, $13, $14, $15, $16::jsonb, $17::jsonb,
		$18::jsonb, $19, $20, $21, $22, $23, $24, $25::jsonb, $26, $27, $28, $29, $30, $31, $32)`,
		id, sc.Namespace, sc.Queue, sc.TaskType, sc.TypeVersion, string(st.Status), sc.Priority,
		st.RunAt, st.Attempt, sc.MaxAttempts, leaseOwner, st.Lease.Epoch, leaseExpires, nullIfEmpty(sc.IdempotencyKey),
		nullIfEmpty(sc.TraceID), jsonOrNull(tb, sc.Input), jsonOrNull(tb, st.Output), jsonOf(tb, st.LastError),
		st.CancelRequested, st.LastSeq, st.CreatedAt, st.UpdatedAt, timeOrNull(st.StartedAt),
		timeOrNull(st.FinishedAt), jsonOf(tb, sc.Labels), sc.Deadline, sc.StartDeadline, nullIfEmpty(sc.FairnessKey),
		fairnessWeight, parentID, parentPosition, historyBytes)
	require.NoError(tb, pool.SendBatch(context.Background(), batch).Close(), "task %s", id)
	return st
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func timeOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// jsonOrNull is raw as the text of a jsonb parameter, or NULL.
func jsonOrNull(tb testing.TB, raw json.RawMessage) any {
	tb.Helper()
	if len(raw) == 0 {
		return nil
	}
	require.True(tb, json.Valid(raw), "not JSON: %s", raw)
	return string(raw)
}

// jsonOf is v encoded as the text of a jsonb parameter, or NULL for a nil
// pointer or map.
func jsonOf[T any](tb testing.TB, v T) any {
	tb.Helper()
	data, err := json.Marshal(v)
	require.NoError(tb, err)
	if string(data) == "null" {
		return nil
	}
	return string(data)
}
