package pgstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestEventAppend(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		store *pgstore.Store
		ct    *store.ClaimedTask
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		s := enginetest.Store(t)
		enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
		return &testBundle{store: s, ct: enginetest.ClaimOne(t, s, "w", time.Minute)}
	}
	step := func(pos int) history.Payload {
		return history.StepCompletedData{Position: pos, Name: "step", Output: json.RawMessage(`{"pos":1}`)}
	}
	// requireUnchanged checks that a refused append wrote nothing.
	requireUnchanged := func(t *testing.T, bundle *testBundle, lastSeq int64) {
		t.Helper()
		task := enginetest.GetTask(t, bundle.store, bundle.ct.Task.ID)
		require.Equal(t, lastSeq, task.LastSeq)
		require.Len(t, enginetest.Events(t, bundle.store, bundle.ct.Task.ID), int(lastSeq))
		enginetest.RequireProjectionsMatch(t, bundle.store)
	}

	t.Run("AppendsAndReturnsNextState", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
		st, err := bundle.store.EventAppend(context.Background(), &store.EventAppendParams{
			TaskID: bundle.ct.Task.ID, State: bundle.ct.State, Epoch: bundle.ct.State.Lease.Epoch,
			Attempt: 1, At: at, Payloads: []history.Payload{step(0), step(1)},
		})
		require.NoError(t, err)
		require.Equal(t, int64(4), st.LastSeq)
		require.Len(t, st.Steps, 2)
		require.True(t, st.UpdatedAt.Equal(at))
		evs := enginetest.Events(t, bundle.store, bundle.ct.Task.ID)
		require.Len(t, evs, 4)
		for _, ev := range evs[2:] {
			require.True(t, ev.At.Equal(at))
			require.Equal(t, 1, ev.Attempt)
			require.Equal(t, history.StepCompleted, ev.Type())
		}
		replayed, err := history.Replay(evs)
		require.NoError(t, err)
		// The returned state is the replay of the stored log; outputs are
		// equal as JSON (jsonb normalizes their spacing).
		require.Len(t, replayed.Steps, len(st.Steps))
		for i := range st.Steps {
			require.Equal(t, st.Steps[i].Name, replayed.Steps[i].Name)
			require.Equal(t, st.Steps[i].Position, replayed.Steps[i].Position)
			require.JSONEq(t, string(st.Steps[i].Output), string(replayed.Steps[i].Output))
		}
		st.Steps, replayed.Steps = nil, nil
		require.Equal(t, st, replayed)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, bundle.store))
	})

	t.Run("StaleEpochIsFenced", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		_, err := bundle.store.EventAppend(context.Background(), &store.EventAppendParams{
			TaskID: bundle.ct.Task.ID, State: bundle.ct.State, Epoch: bundle.ct.State.Lease.Epoch + 1,
			Attempt: 1, Payloads: []history.Payload{step(0)},
		})
		require.True(t, errors.Is(err, store.ErrFenced), "got %v", err)
		require.False(t, errors.Is(err, store.ErrConflict))
		requireUnchanged(t, bundle, 2)
	})

	t.Run("OldAttemptIsFencedAfterReclaim", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)
		s, old := bundle.store, bundle.ct
		_, err := enginetest.AppendFenced(ctx, s, old, history.TaskReleasedData{WorkerID: "w", LeaseEpoch: old.State.Lease.Epoch})
		require.NoError(t, err)
		current := enginetest.ClaimOne(t, s, "w2", time.Minute)
		// The old attempt's worker, unaware, tries to finish the task.
		_, err = enginetest.AppendFenced(ctx, s, old, history.TaskCompletedData{Output: json.RawMessage(`"stale"`)})
		require.True(t, errors.Is(err, store.ErrFenced), "got %v", err)
		enginetest.Complete(t, s, current)
		task := enginetest.GetTask(t, s, old.Task.ID)
		require.Equal(t, history.StatusCompleted, task.Status)
		require.JSONEq(t, `{"ok":true}`, string(task.Output), "the stale write never becomes the outcome")
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("StaleSeqConflicts", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)
		_, err := enginetest.AppendFenced(ctx, bundle.store, bundle.ct, step(0))
		require.NoError(t, err)
		// Same epoch, but the log moved on.
		_, err = enginetest.AppendFenced(ctx, bundle.store, bundle.ct, step(0))
		require.True(t, errors.Is(err, store.ErrConflict), "got %v", err)
		require.False(t, errors.Is(err, store.ErrFenced))
		// Unfenced (API) appends are checked by seq alone.
		_, err = bundle.store.EventAppend(ctx, &store.EventAppendParams{
			TaskID: bundle.ct.Task.ID, State: bundle.ct.State, Attempt: 1, Payloads: []history.Payload{step(0)},
		})
		require.True(t, errors.Is(err, store.ErrConflict), "got %v", err)
		requireUnchanged(t, bundle, 3)
	})

	t.Run("UnknownTaskNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, epoch := range []int64{0, bundle.ct.State.Lease.Epoch} {
			_, err := bundle.store.EventAppend(context.Background(), &store.EventAppendParams{
				TaskID: uuid.New(), State: bundle.ct.State, Epoch: epoch, Attempt: 1, Payloads: []history.Payload{step(0)},
			})
			require.True(t, errors.Is(err, store.ErrNotFound), "epoch %d: got %v", epoch, err)
		}
		requireUnchanged(t, bundle, 2)
	})

	t.Run("InvalidTransitionWritesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)
		for name, payloads := range map[string][]history.Payload{
			"position repeated":   {step(1), step(1)},
			"second start":        {history.AttemptStartedData{WorkerID: "x", LeaseEpoch: 9}},
			"valid then invalid":  {step(0), step(0)},
			"wrong release epoch": {history.TaskReleasedData{WorkerID: "w", LeaseEpoch: 99}},
			"after terminal":      {history.TaskCompletedData{}, step(0)},
			"nil payload":         {nil},
		} {
			_, err := enginetest.AppendFenced(ctx, bundle.store, bundle.ct, payloads...)
			require.True(t, errors.Is(err, history.ErrInvalidHistory), "%s: got %v", name, err)
		}
		_, err := bundle.store.EventAppend(ctx, &store.EventAppendParams{
			TaskID: bundle.ct.Task.ID, State: bundle.ct.State, Epoch: bundle.ct.State.Lease.Epoch,
			Attempt: 2, Payloads: []history.Payload{step(0)},
		})
		require.True(t, errors.Is(err, history.ErrInvalidHistory), "wrong attempt: got %v", err)
		_, err = enginetest.AppendFenced(ctx, bundle.store, bundle.ct)
		require.Error(t, err, "no events")
		requireUnchanged(t, bundle, 2)
	})

	t.Run("FailureThenTerminalInOneAppend", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		info := history.ErrorInfo{Class: history.Permanent, Message: "bad input", Kind: "validation", Status: 422,
			Attrs: map[string]string{"field": "x"}, Step: "parse", Position: 0}
		st, err := enginetest.AppendFenced(context.Background(), bundle.store, bundle.ct,
			history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info})
		require.NoError(t, err)
		require.Equal(t, history.StatusFailed, st.Status)
		task := enginetest.GetTask(t, bundle.store, bundle.ct.Task.ID)
		require.Equal(t, history.StatusFailed, task.Status)
		require.Equal(t, &info, task.LastError)
		require.NotNil(t, task.FinishedAt)
		require.Nil(t, task.LeaseExpiresAt)
		require.Empty(t, task.LeaseOwner)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, bundle.store))
	})

	t.Run("RetryKeepsProjectionExact", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// A backoff computed from the wall clock carries nanoseconds, which
		// PostgreSQL cannot store. The projection row must still equal the
		// replay of the log.
		next := time.Now().Add(time.Hour).Truncate(time.Second).Add(123456789 * time.Nanosecond)
		_, err := enginetest.AppendFenced(context.Background(), bundle.store, bundle.ct, history.AttemptFailedData{
			Error: history.ErrorInfo{Class: history.Transient, Message: "timeout"}, NextRunAt: &next,
		})
		require.NoError(t, err)
		task := enginetest.GetTask(t, bundle.store, bundle.ct.Task.ID)
		require.Equal(t, history.StatusRetrying, task.Status)
		require.WithinDuration(t, next, task.RunAt, time.Microsecond)
		require.Empty(t, enginetest.Claim(t, bundle.store, enginetest.ClaimParams("w", 1, time.Minute)), "not due before its next run time")
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, bundle.store))
	})

	t.Run("ConcurrentAppendsOneWins", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const n = 10
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = enginetest.AppendFenced(context.Background(), bundle.store, bundle.ct, step(0))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.True(t, errors.Is(err, store.ErrConflict), "got %v", err)
		}
		require.Equal(t, 1, won)
		requireUnchanged(t, bundle, 3)
	})

	t.Run("ExpiredOnlyRefusesLiveLease", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		st := bundle.ct.State
		_, err := bundle.store.EventAppend(context.Background(), &store.EventAppendParams{
			TaskID: bundle.ct.Task.ID, State: st, Epoch: st.Lease.Epoch, ExpiredOnly: true, Attempt: 1,
			Payloads: []history.Payload{history.LeaseExpiredData{WorkerID: "w", LeaseEpoch: st.Lease.Epoch, NextRunAt: plan.Now(nil)}},
		})
		require.True(t, errors.Is(err, store.ErrConflict), "got %v", err)
		requireUnchanged(t, bundle, 2)
	})
}

// requireAppendOnly checks that err is the append-only trigger's refusal.
func requireAppendOnly(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want the trigger's error, got %v", err)
	require.Equal(t, "23001", pgErr.Code, "restrict_violation; got %v", err)
}

func TestEventsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	ids := enginetest.StartTasks(t, s, 2, nil)
	eventsTable := enginetest.TableName(s, "events")

	_, err := s.Pool().Exec(ctx, "UPDATE "+eventsTable+" SET type = 'task_completed'")
	requireAppendOnly(t, err)
	_, err = s.Pool().Exec(ctx, "UPDATE "+eventsTable+" SET data = data || '{\"x\":1}' WHERE task_id = $1", ids[0])
	requireAppendOnly(t, err)
	_, err = s.Pool().Exec(ctx, "DELETE FROM "+eventsTable+" WHERE task_id = $1", ids[0])
	requireAppendOnly(t, err)
	_, err = s.Pool().Exec(ctx, "TRUNCATE "+eventsTable)
	requireAppendOnly(t, err)
	require.Equal(t, 2, enginetest.CountRows(t, s, "events"))

	// Retention says so for its own transaction only.
	conn, err := s.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL cairn.retention = 'on'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+eventsTable+" SET type = 'task_completed' WHERE task_id = $1", ids[0])
		return err
	})
	requireAppendOnly(t, err) // retention may delete, never update

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL cairn.retention = 'on'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "TRUNCATE "+eventsTable)
		return err
	})
	requireAppendOnly(t, err) // nor truncate
	require.Equal(t, 2, enginetest.CountRows(t, s, "events"))

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL cairn.retention = 'on'"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+eventsTable+" WHERE task_id = $1", ids[0]); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+enginetest.TableName(s, "tasks")+" WHERE id = $1", ids[0])
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 1, enginetest.CountRows(t, s, "events"))

	// The same connection, after that transaction: refused again.
	_, err = conn.Exec(ctx, "DELETE FROM "+eventsTable+" WHERE task_id = $1", ids[1])
	requireAppendOnly(t, err)
	_, err = conn.Exec(ctx, "SET cairn.retention = 'off'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "DELETE FROM "+eventsTable+" WHERE task_id = $1", ids[1])
	requireAppendOnly(t, err)
	_, err = conn.Exec(ctx, "RESET cairn.retention")
	require.NoError(t, err)

	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}
