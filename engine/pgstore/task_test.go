package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestTaskStart(t *testing.T) {
	t.Parallel()

	// A large input is sent once and put back into task_scheduled by the
	// statement (scheduledData): the event holds it as a small one's does,
	// beside inputs on both sides of the threshold in one batch.
	t.Run("LargeInputInScheduledEvent", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		inputs := []json.RawMessage{
			json.RawMessage(`{"doc":"` + strings.Repeat("x", 3000) + `","n":1}`),
			json.RawMessage(`{"small":true}`),
			nil,
			json.RawMessage(`"` + strings.Repeat("y", 600) + `"`),
		}
		ps := make([]*store.TaskStartParams, len(inputs))
		for i, in := range inputs {
			ps[i] = &store.TaskStartParams{Namespace: "ns", Scheduled: history.TaskScheduledData{
				TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 1, Input: in,
			}}
		}
		res, err := s.TaskStartMany(ctx, ps) // TaskInsertMany
		require.NoError(t, err)
		require.Len(t, res, len(inputs))
		for _, p := range ps { // TaskInsertOne, the same inputs one by one
			r, err := s.TaskStart(ctx, p)
			require.NoError(t, err)
			res = append(res, r)
		}
		inputs = append(inputs, inputs...)
		for i, r := range res {
			evs := enginetest.Events(t, s, r.ID)
			require.Len(t, evs, 1)
			sc, ok := evs[0].Data.(history.TaskScheduledData)
			require.True(t, ok, "first event is %T", evs[0].Data)
			if inputs[i] == nil {
				require.Empty(t, sc.Input, "input %d", i)
			} else {
				require.JSONEq(t, string(inputs[i]), string(sc.Input), "input %d", i)
			}
			require.Equal(t, "doc", sc.TaskType, "the rest of the payload, input %d", i)
		}
		require.Equal(t, len(inputs), enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("WritesRowAndScheduledEvent", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		runAt := time.Now().Add(time.Hour)
		res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "ns1", Scheduled: history.TaskScheduledData{
			Namespace: "ignored", TaskType: "doc", TypeVersion: 2, Queue: "q", Priority: 7,
			Input: json.RawMessage(`{"b": [1, 2], "a": "x"}`), RunAt: runAt, IdempotencyKey: "k",
			TraceID: "trace-1", Labels: map[string]string{"team": "x"}, MaxAttempts: 4,
		}})
		require.NoError(t, err)
		require.False(t, res.Existing)
		require.Equal(t, uuid.Version(7), res.ID.Version())

		task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "ns1", ID: res.ID})
		require.NoError(t, err)
		require.Equal(t, "ns1", task.Namespace, "the params' namespace wins over the payload's")
		require.Equal(t, history.StatusPending, task.Status)
		require.Equal(t, "q", task.Queue)
		require.Equal(t, "doc", task.Type)
		require.Equal(t, 2, task.TypeVersion)
		require.Equal(t, 7, task.Priority)
		require.Equal(t, 4, task.MaxAttempts)
		require.Equal(t, "k", task.IdempotencyKey)
		require.Equal(t, "trace-1", task.TraceID)
		require.Equal(t, int64(1), task.LastSeq)
		require.Zero(t, task.Attempt)
		require.Nil(t, task.LeaseExpiresAt)
		require.True(t, task.RunAt.Equal(runAt.Truncate(time.Microsecond)), "run_at %s, want %s", task.RunAt, runAt)
		require.JSONEq(t, `{"a": "x", "b": [1, 2]}`, string(task.Input))

		evs := enginetest.Events(t, s, res.ID)
		require.Len(t, evs, 1)
		require.Equal(t, int64(1), evs[0].Seq)
		sc, ok := evs[0].Data.(history.TaskScheduledData)
		require.True(t, ok, "first event is %T", evs[0].Data)
		require.Equal(t, "ns1", sc.Namespace)
		require.Equal(t, map[string]string{"team": "x"}, sc.Labels)

		_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: res.ID})
		require.True(t, errors.Is(err, store.ErrNotFound), "a task is found only in its namespace; got %v", err)
		enginetest.RequireProjectionsMatch(t, s)
	})

	t.Run("RefusesEmptyNamespace", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		_, err := s.TaskStart(context.Background(), &store.TaskStartParams{Scheduled: history.TaskScheduledData{TaskType: "x", Queue: "default"}})
		require.Error(t, err)
		require.Zero(t, enginetest.CountRows(t, s, "tasks"))
		require.Zero(t, enginetest.CountRows(t, s, "events"))
	})

	t.Run("RefusesScheduledWithoutType", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		// A row without a task type would never replay; TaskStart must not
		// write what history refuses.
		_, err := s.TaskStart(context.Background(), &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{Queue: "default"}})
		require.Error(t, err)
		require.Zero(t, enginetest.CountRows(t, s, "tasks"))
		enginetest.RequireProjectionsMatch(t, s)
	})
}

func TestTaskStartIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("SecondStartReturnsExisting", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		opts := &enginetest.TaskOpts{IdempotencyKey: "order-42", Input: json.RawMessage(`1`)}
		first, err := s.TaskStart(ctx, opts.Params())
		require.NoError(t, err)
		require.False(t, first.Existing)

		// Different input, same key: still the first task.
		opts.Input = json.RawMessage(`2`)
		second, err := s.TaskStart(ctx, opts.Params())
		require.NoError(t, err)
		require.True(t, second.Existing)
		require.Equal(t, first.ID, second.ID)

		require.Equal(t, 1, enginetest.CountRows(t, s, "tasks"))
		require.Equal(t, 1, enginetest.CountRows(t, s, "events"))
		require.JSONEq(t, `1`, string(enginetest.GetTask(t, s, first.ID).Input))
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("KeyIsPerNamespace", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		a, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Namespace: "a", IdempotencyKey: "k"}).Params())
		require.NoError(t, err)
		b, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Namespace: "b", IdempotencyKey: "k"}).Params())
		require.NoError(t, err)
		require.False(t, b.Existing)
		require.NotEqual(t, a.ID, b.ID)
		again, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Namespace: "b", IdempotencyKey: "k"}).Params())
		require.NoError(t, err)
		require.True(t, again.Existing)
		require.Equal(t, b.ID, again.ID)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("NoKeyNoDedup", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		a := enginetest.StartTask(t, s, nil)
		b := enginetest.StartTask(t, s, nil)
		require.NotEqual(t, a, b)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("ConcurrentStartsCreateOneTask", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		const n = 50
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]store.TaskStartResult, n)
			errs    = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.TaskStart(context.Background(), (&enginetest.TaskOpts{IdempotencyKey: "race"}).Params())
			})
		}
		close(start)
		wg.Wait()
		created := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, results[0].ID, results[i].ID)
			if !results[i].Existing {
				created++
			}
		}
		require.Equal(t, 1, created, "exactly one start creates the task")
		require.Equal(t, 1, enginetest.CountRows(t, s, "tasks"))
		require.Equal(t, 1, enginetest.CountRows(t, s, "events"))
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})
}

// TestTaskStartTxOutbox checks the outbox (WithTx(tx).TaskStart): a task started in the caller's
// transaction exists, and wakes workers, if and only if that transaction
// commits.
func TestTaskStartTxOutbox(t *testing.T) {
	t.Parallel()

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		res, err := s.WithTx(tx).TaskStart(ctx, (&enginetest.TaskOpts{IdempotencyKey: "k"}).Params())
		require.NoError(t, err)
		require.False(t, res.Existing)
		require.Zero(t, enginetest.CountRows(t, s, "tasks"), "an uncommitted task is invisible")
		require.NoError(t, tx.Rollback(ctx))

		_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: res.ID})
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
		require.Empty(t, enginetest.Events(t, s, res.ID))
		require.Zero(t, enginetest.CountRows(t, s, "tasks"))
		require.Zero(t, enginetest.CountRows(t, s, "events"))
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 10, time.Minute)))

		// The rolled back key is free again.
		again, err := s.TaskStart(ctx, (&enginetest.TaskOpts{IdempotencyKey: "k"}).Params())
		require.NoError(t, err)
		require.False(t, again.Existing)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("CommitMakesTaskClaimable", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// The service's own write, in the same transaction.
		_, err = tx.Exec(ctx, "CREATE TABLE "+enginetest.TableName(s, "orders")+" (id int)")
		require.NoError(t, err)
		res, err := s.WithTx(tx).TaskStart(ctx, defaultParams())
		require.NoError(t, err)
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 10, time.Minute)), "claimable before commit")
		require.NoError(t, tx.Commit(ctx))

		ct := enginetest.ClaimOne(t, s, "w", time.Minute)
		require.Equal(t, res.ID, ct.Task.ID)
		enginetest.Complete(t, s, ct)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("IdempotencyInsideTx", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		opts := &enginetest.TaskOpts{IdempotencyKey: "k"}
		a, err := s.WithTx(tx).TaskStart(ctx, opts.Params())
		require.NoError(t, err)
		b, err := s.WithTx(tx).TaskStart(ctx, opts.Params())
		require.NoError(t, err)
		require.True(t, b.Existing)
		require.Equal(t, a.ID, b.ID)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("WithTxStatementsCommitWithTheCallersTx", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		conn := listener(t, s)
		tx := mustBegin(t, s)
		// The service's own write, in the same transaction.
		_, err := tx.Exec(ctx, "CREATE TABLE "+enginetest.TableName(s, "orders")+" (id int)")
		require.NoError(t, err)
		in := s.WithTx(tx)
		res, err := in.TaskStart(ctx, defaultParams())
		require.NoError(t, err)
		task, err := in.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: res.ID})
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, task.Status, "the transaction sees its own start")
		require.Zero(t, enginetest.CountRows(t, s, "tasks"), "an uncommitted task is invisible")
		notifyMarker(t, s, "marker")
		require.Equal(t, "marker", nextNotification(t, conn), "notified before commit")
		require.NoError(t, tx.Commit(ctx), "the caller commits its own transaction")
		require.Equal(t, "default", nextNotification(t, conn))
		require.NoError(t, in.Rollback(ctx), "the caller's commit ended it")

		ct := enginetest.ClaimOne(t, s, "w", time.Minute)
		require.Equal(t, res.ID, ct.Task.ID)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})
}

// mustBegin begins a transaction on the store's pool, rolled back when the
// test ends (a no-op once committed).
func mustBegin(t *testing.T, s *pgstore.Store) pgx.Tx {
	t.Helper()
	tx, err := s.Pool().Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func defaultParams() *store.TaskStartParams { return (*enginetest.TaskOpts)(nil).Params() }

// listener is a raw LISTEN connection on the store's channel, which sees
// notification payloads (the queue of the task that became ready).
func listener(t *testing.T, s *pgstore.Store) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, enginetest.DatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Schema() + ".ready"}.Sanitize())
	require.NoError(t, err)
	return conn
}

func nextNotification(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.WaitTimeout)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	return n.Payload
}

// notifyMarker sends a notification on the store's channel in a transaction
// of its own. PostgreSQL delivers notifications in commit order, so a
// listener that sees the marker first has not been sent anything committed
// before it.
func notifyMarker(t *testing.T, s *pgstore.Store, payload string) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), "SELECT pg_notify($1, $2)", s.Schema()+".ready", payload)
	require.NoError(t, err)
}

func TestTaskStartNotifiesOnCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	conn := listener(t, s)

	t.Log("a start in a transaction notifies when it commits, not before")
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = s.WithTx(tx).TaskStart(ctx, (&enginetest.TaskOpts{Queue: "mail"}).Params())
	require.NoError(t, err)
	notifyMarker(t, s, "marker-1")
	require.Equal(t, "marker-1", nextNotification(t, conn), "notified before commit")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "mail", nextNotification(t, conn))

	t.Log("a rolled back start never notifies")
	tx, err = s.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = s.WithTx(tx).TaskStart(ctx, (&enginetest.TaskOpts{Queue: "mail"}).Params())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	notifyMarker(t, s, "marker-2")
	require.Equal(t, "marker-2", nextNotification(t, conn), "a rolled back start notified")

	t.Log("a plain start notifies; an idempotent repeat does not")
	_, err = s.TaskStart(ctx, (&enginetest.TaskOpts{Queue: "q2", IdempotencyKey: "k"}).Params())
	require.NoError(t, err)
	require.Equal(t, "q2", nextNotification(t, conn))
	res, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Queue: "q2", IdempotencyKey: "k"}).Params())
	require.NoError(t, err)
	require.True(t, res.Existing)
	notifyMarker(t, s, "marker-3")
	require.Equal(t, "marker-3", nextNotification(t, conn), "an existing task notified again")

	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}

func TestTaskList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	a := enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "a"})
	b := enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "b"})
	c := enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "a"})
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "a", Namespace: "other"})

	ids := func(tasks []*store.Task) []uuid.UUID {
		out := make([]uuid.UUID, len(tasks))
		for i, task := range tasks {
			out[i] = task.ID
		}
		return out
	}
	all, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{c, b, a}, ids(all), "newest first, this namespace only")

	typeA, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Type: "a"})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{c, a}, ids(typeA))

	limited, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{c}, ids(limited))

	ct := enginetest.Claim(t, s, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "b", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.Len(t, ct, 1)
	running, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Status: history.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b}, ids(running))

	many, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []uuid.UUID{a, c, uuid.New()}})
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{a, c}, ids(many))
	require.Equal(t, 4, enginetest.RequireProjectionsMatch(t, s))
}

func TestValidateSchemaName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"cairn", true},
		{"_cairn", true},
		{"cairn_2", true},
		{"a23456789012345678901234567890123456789012345678", true}, // 48
		{"", false},
		{"a234567890123456789012345678901234567890123456789", false}, // 49
		{"2cairn", false},
		{"Cairn", false},
		{"cairn-x", false},
		{"cairn.x", false},
		{`cairn"; DROP TABLE x; --`, false},
		{"cairné", false},
	} {
		err := pgstore.ValidateSchemaName(tt.name)
		if tt.ok {
			require.NoError(t, err, "%q", tt.name)
		} else {
			require.Error(t, err, "%q", tt.name)
		}
	}
	_, err := pgstore.New(pgstore.Config{Pool: nil})
	require.Error(t, err)
}

// TestTaskInsertOneAgreesWithTaskInsertMany starts the same starts alone
// (TaskInsertOne) and in a batch (TaskInsertMany) in two schemas, each
// after the same keyed task already waits, and compares what was written:
// the rows (fair_at included) and the task_scheduled events.
func TestTaskInsertOneAgreesWithTaskInsertMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	at := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	starts := []*store.TaskStartParams{
		{Namespace: "ns", Scheduled: history.TaskScheduledData{TaskType: "doc", TypeVersion: 2, Queue: "q", Priority: 3,
			MaxAttempts: 4, IdempotencyKey: "k1", TraceID: "trace", Input: json.RawMessage(`{"a":1}`),
			Labels: map[string]string{"tenant": "acme"}, Deadline: &deadline, StartDeadline: &deadline,
			FairnessKey: "acme", FairnessWeight: 2, RunAt: at}},
		{Namespace: "ns", Scheduled: history.TaskScheduledData{TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 1,
			Input: json.RawMessage(`"` + strings.Repeat("z", 700) + `"`), RunAt: at}},
	}
	waiting := &store.TaskStartParams{Namespace: "ns", Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 1, FairnessKey: "acme", RunAt: at}}
	written := func(s *pgstore.Store, ids []uuid.UUID) []string {
		t.Helper()
		var out []string
		for _, id := range ids {
			var row string
			err := s.Pool().QueryRow(ctx, `SELECT jsonb_build_object(
				'task', to_jsonb(t) - 'id' - 'created_at' - 'updated_at',
				'event', (SELECT to_jsonb(e) - 'task_id' - 'at' FROM `+enginetest.TableName(s, "events")+` AS e WHERE e.task_id = t.id))::text
				FROM `+enginetest.TableName(s, "tasks")+` AS t WHERE t.id = $1`, id).Scan(&row)
			require.NoError(t, err)
			out = append(out, row)
		}
		return out
	}
	var rows [2][]string
	for i, many := range []bool{false, true} {
		s := enginetest.Store(t)
		_, err := s.TaskStart(ctx, waiting)
		require.NoError(t, err)
		var ids []uuid.UUID
		if many {
			res, err := s.TaskStartMany(ctx, starts)
			require.NoError(t, err)
			for _, r := range res {
				ids = append(ids, r.ID)
			}
		} else {
			for _, p := range starts {
				r, err := s.TaskStart(ctx, p)
				require.NoError(t, err)
				ids = append(ids, r.ID)
			}
		}
		rows[i] = written(s, ids)
	}
	require.Equal(t, rows[0], rows[1], "a lone start writes what a batch does")
	require.Contains(t, rows[0][0], `"fair_at"`, "the comparison covers the virtual start time")
}
