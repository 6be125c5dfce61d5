package pgstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// A start whose snapshot predates the commit of a removal retiring its key
// does not see the retired key, and its insert waits on the row the removal
// deletes, then goes in: without the re-check after the insert it would
// create a second task under the key. Each way of starting is tried with a
// removal held open until the start waits on it.
func TestStartRacingARemovalFindsTheRetiredKey(t *testing.T) {
	t.Parallel()
	starts := map[string]func(ctx context.Context, s *pgstore.Store, p *store.TaskStartParams) (store.TaskStartResult, error){
		"Start": func(ctx context.Context, s *pgstore.Store, p *store.TaskStartParams) (store.TaskStartResult, error) {
			return s.TaskStart(ctx, p)
		},
		"StartMany": func(ctx context.Context, s *pgstore.Store, p *store.TaskStartParams) (store.TaskStartResult, error) {
			other := *p
			other.Scheduled.IdempotencyKey = ""
			res, err := s.TaskStartMany(ctx, []*store.TaskStartParams{&other, p})
			if err != nil {
				return store.TaskStartResult{}, err
			}
			return res[1], nil
		},
		"RefuseKeyReuse": func(ctx context.Context, s *pgstore.Store, p *store.TaskStartParams) (store.TaskStartResult, error) {
			refusing := *p
			refusing.RefuseKeyReuse = true
			return s.TaskStart(ctx, &refusing)
		},
		"StartTx": func(ctx context.Context, s *pgstore.Store, p *store.TaskStartParams) (res store.TaskStartResult, err error) {
			err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
				res, err = s.WithTx(tx).TaskStart(ctx, p)
				return err
			})
			return res, err
		},
	}
	isolations := map[string]string{"": "", "RepeatableReadByDefault": "repeatable read"}
	for name, startFn := range starts {
		for iso, level := range isolations {
			if level != "" && name == "StartTx" {
				continue // the caller's isolation: a documented gap
			}
			t.Run(name+iso, func(t *testing.T) {
				t.Parallel()
				testStartRacingARemoval(t, startFn, level)
			})
		}
	}
}

// testStartRacingARemoval runs one start racing a held removal, over
// connections whose default isolation is level ("": the server's).
func testStartRacingARemoval(t *testing.T, startFn func(context.Context, *pgstore.Store, *store.TaskStartParams) (store.TaskStartResult, error), level string) {
	ctx := context.Background()
	s := enginetest.Store(t)
	if level != "" {
		cfg, err := pgxpool.ParseConfig(enginetest.DatabaseURL(t))
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err = pgstore.New(pgstore.Config{Pool: pool, Schema: s.Schema()})
		require.NoError(t, err)
	}
	p := &store.TaskStartParams{Namespace: store.DefaultNamespace, Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 1, IdempotencyKey: "k",
		Input: json.RawMessage(`{"doc":1}`),
	}}
	first, err := s.TaskStart(ctx, p)
	require.NoError(t, err)

	removal := holdRemoval(t, s, first.ID, plan.InputDigest(p.Scheduled.Input))
	type answer struct {
		res store.TaskStartResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := startFn(ctx, s, p)
		answered <- answer{res, err}
	}()
	enginetest.WaitFor(t, "the start to wait on the removal's lock", func() bool {
		var waiting bool
		require.NoError(t, s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, s.Schema()).Scan(&waiting))
		return waiting
	})
	require.NoError(t, removal.Commit(ctx))

	got := <-answered
	require.NoError(t, got.err)
	require.Equal(t, store.TaskStartResult{ID: first.ID, Existing: true}, got.res,
		"the start finds the removed task as the key's holder")
	var live int
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+enginetest.TableName(s, "tasks")+
		` WHERE idempotency_key = 'k'`).Scan(&live))
	require.Zero(t, live, "no second task holds the retired key")
	enginetest.RequireProjectionsMatch(t, s)
}

// holdRemoval removes task id as TaskRemove does (its key retired for an
// hour, with its input's digest) in a transaction it leaves open for the
// caller to commit.
func holdRemoval(t *testing.T, s *pgstore.Store, id uuid.UUID, digest []byte) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	steps := []struct {
		sql  string
		args []any
	}{
		{`SELECT set_config('cairn.retention', 'on', true)`, nil},
		{`INSERT INTO ` + enginetest.TableName(s, "retired_keys") + ` (namespace, idempotency_key, task_id, task_type, input_sha256, removed_at, expires_at)
		  SELECT namespace, idempotency_key, id, type, $2, now(), now() + interval '1 hour'
		  FROM ` + enginetest.TableName(s, "tasks") + ` WHERE id = $1`, []any{id, digest}},
		{`DELETE FROM ` + enginetest.TableName(s, "events") + ` WHERE task_id = $1`, []any{id}},
		{`DELETE FROM ` + enginetest.TableName(s, "tasks") + ` WHERE id = $1`, []any{id}},
	}
	for _, step := range steps {
		_, err := tx.Exec(ctx, step.sql, step.args...)
		require.NoError(t, err, step.sql)
	}
	return tx
}
