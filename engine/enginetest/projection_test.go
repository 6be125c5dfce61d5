package enginetest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestProjectionDiffDetectsTampering proves the invariant check can fail:
// each column written behind the log's back is reported.
func TestProjectionDiffDetectsTampering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3, IdempotencyKey: "k", Input: []byte(`{"a":1}`)})
	ct := enginetest.ClaimOne(t, s, "w", time.Hour)
	require.Equal(t, id, ct.Task.ID)
	tasks := enginetest.TableName(s, "tasks")
	_, err := s.Pool().Exec(ctx, "CREATE TABLE "+enginetest.TableName(s, "tasks_backup")+" AS SELECT * FROM "+tasks)
	require.NoError(t, err)
	restore := func() {
		t.Helper()
		_, err := s.Pool().Exec(ctx, "DELETE FROM "+tasks)
		require.NoError(t, err)
		_, err = s.Pool().Exec(ctx, "INSERT INTO "+tasks+" SELECT * FROM "+enginetest.TableName(s, "tasks_backup"))
		require.NoError(t, err)
	}
	diff := func() []string {
		t.Helper()
		evs := enginetest.Events(t, s, id)
		st, err := history.Replay(evs)
		require.NoError(t, err)
		return enginetest.ProjectionDiff(enginetest.GetTask(t, s, id), st)
	}
	require.Empty(t, diff(), "untampered")

	for column, set := range map[string]string{
		"status":           "status = 'completed'",
		"queue":            "queue = 'other'",
		"type":             "type = 'other'",
		"type_version":     "type_version = 2",
		"priority":         "priority = 9",
		"max_attempts":     "max_attempts = 4",
		"idempotency_key":  "idempotency_key = NULL",
		"trace_id":         "trace_id = 'x'",
		"input":            `input = '{"a":2}'`,
		"run_at":           "run_at = run_at + interval '1 microsecond'",
		"attempt":          "attempt = 2",
		"lease_owner":      "lease_owner = 'someone'",
		"lease_epoch":      "lease_epoch = 7",
		"lease_expires_at": "lease_expires_at = NULL",
		"output":           `output = '"x"'`,
		"last_error":       `last_error = '{"class":"transient","message":"m"}'`,
		"cancel_requested": "cancel_requested = true",
		"last_seq":         "last_seq = 3",
		"created_at":       "created_at = created_at - interval '1 second'",
		"updated_at":       "updated_at = now() + interval '1 hour'",
		"started_at":       "started_at = NULL",
		"finished_at":      "finished_at = now()",
		"fairness_key":     "fairness_key = 'tenant'",
		"fairness_weight":  "fairness_weight = 2",
	} {
		_, err := s.Pool().Exec(ctx, "UPDATE "+tasks+" SET "+set+" WHERE id = $1", id)
		require.NoError(t, err, column)
		d := diff()
		require.Len(t, d, 1, "tampering with %s: %v", column, d)
		require.True(t, strings.HasPrefix(d[0], column+":"), "tampering with %s reported as %v", column, d)
		restore()
	}
	require.Empty(t, diff())

	// A row whose lease extends without an owner is caught as well.
	enginetest.Complete(t, s, ct)
	_, err = s.Pool().Exec(ctx, "UPDATE "+tasks+" SET lease_expires_at = now() WHERE id = $1", id)
	require.NoError(t, err)
	require.NotEmpty(t, diff())
	_, err = s.Pool().Exec(ctx, "UPDATE "+tasks+" SET lease_expires_at = NULL WHERE id = $1", id)
	require.NoError(t, err)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

// recordingTB is a testing.TB that records failures instead of failing the
// test, so a test can check that a helper fails.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) FailNow() { runtime.Goexit() }

// failures runs fn with a recording TB on a goroutine of its own, since
// FailNow ends the goroutine, and returns what it reported.
func failures(t *testing.T, fn func(tb testing.TB)) []string {
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.errors
}

func TestRequireProjectionsMatchFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	ids := enginetest.StartTasks(t, s, 3, nil)
	require.Empty(t, failures(t, func(tb testing.TB) { enginetest.RequireProjectionsMatch(tb, s) }))

	tasks := enginetest.TableName(s, "tasks")
	_, err := s.Pool().Exec(ctx, "UPDATE "+tasks+" SET status = 'failed' WHERE id = $1", ids[1])
	require.NoError(t, err)
	got := failures(t, func(tb testing.TB) { enginetest.RequireProjectionsMatch(tb, s) })
	require.Len(t, got, 1)
	require.Contains(t, got[0], ids[1].String())
	require.Contains(t, got[0], "status")

	// A row without a replayable log fails too.
	_, err = s.Pool().Exec(ctx, "UPDATE "+tasks+" SET status = 'pending' WHERE id = $1", ids[1])
	require.NoError(t, err)
	orphan := uuid.New()
	_, err = s.Pool().Exec(ctx, "INSERT INTO "+tasks+" (id, namespace, queue, type, type_version, status, priority, run_at, attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at, idempotency_key, trace_id, input, output, last_error, cancel_requested, last_seq, created_at, updated_at, started_at, finished_at, fair_at) SELECT $1, namespace, queue, type, type_version, status, priority, run_at, attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at, idempotency_key, trace_id, input, output, last_error, cancel_requested, last_seq, created_at, updated_at, started_at, finished_at, fair_at FROM "+tasks+" WHERE id = $2", orphan, ids[0])
	require.NoError(t, err)
	got = failures(t, func(tb testing.TB) { enginetest.RequireProjectionsMatch(tb, s) })
	require.Len(t, got, 1)
	require.Contains(t, got[0], orphan.String())
	_, err = s.Pool().Exec(ctx, "DELETE FROM "+tasks+" WHERE id = $1", orphan)
	require.NoError(t, err)
	require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, s))
}
