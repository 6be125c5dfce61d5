package engine_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/pgstore"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// testKey is the type key of tasks started with default [enginetest.TaskOpts].
var testKey = engine.TypeKey{Type: "test", Version: 1}

// waitTimeout bounds every wait for a condition; conditions normally hold
// within milliseconds, so reaching it means the condition never will.
const waitTimeout = 15 * time.Second

// pollInterval is how often waits re-check the database.
const pollInterval = 10 * time.Millisecond

// claimOpts is a claim of default test tasks by owner.
func claimOpts(owner string, max int, ttl time.Duration) *engine.TaskClaimManyParams {
	return &engine.TaskClaimManyParams{
		Namespace: engine.DefaultNamespace, Queues: []string{"default"}, Types: []engine.TypeKey{testKey},
		Owner: owner, Max: max, LeaseTTL: ttl,
	}
}

func claim(t testing.TB, s *pgstore.Store, p *engine.TaskClaimManyParams) []*engine.ClaimedTask {
	t.Helper()
	claimed, err := s.TaskClaimMany(context.Background(), p)
	require.NoError(t, err)
	return claimed
}

// claimOne claims exactly one default test task for owner.
func claimOne(t testing.TB, s *pgstore.Store, owner string, ttl time.Duration) *engine.ClaimedTask {
	t.Helper()
	claimed := claim(t, s, claimOpts(owner, 1, ttl))
	require.Len(t, claimed, 1)
	return claimed[0]
}

// appendFenced appends payloads for ct's attempt, fenced by its epoch.
func appendFenced(ctx context.Context, s *pgstore.Store, ct *engine.ClaimedTask, payloads ...history.Payload) (history.State, error) {
	return s.EventAppend(ctx, &engine.EventAppendParams{
		TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch,
		Attempt: ct.State.Attempt, Payloads: payloads,
	})
}

func complete(t testing.TB, s *pgstore.Store, ct *engine.ClaimedTask) {
	t.Helper()
	_, err := appendFenced(context.Background(), s, ct, history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)})
	require.NoError(t, err)
}

func getTask(t testing.TB, s *pgstore.Store, id uuid.UUID) *engine.Task {
	t.Helper()
	task, err := s.TaskGetByID(context.Background(), engine.DefaultNamespace, id)
	require.NoError(t, err)
	return task
}

func events(t testing.TB, s *pgstore.Store, id uuid.UUID) []history.Event {
	t.Helper()
	evs, err := s.EventListByTask(context.Background(), id)
	require.NoError(t, err)
	return evs
}

// countRows counts the rows of one of the store's tables.
func countRows(t testing.TB, s *pgstore.Store, table string) int {
	t.Helper()
	var n int
	err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{s.Schema(), table}.Sanitize()).Scan(&n)
	require.NoError(t, err)
	return n
}

// tableName is the quoted, schema-qualified name of one of the store's
// tables.
func tableName(s *pgstore.Store, table string) string {
	return pgx.Identifier{s.Schema(), table}.Sanitize()
}

// waitFor polls cond on the test's goroutine (so cond may use require)
// until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		<-ticker.C
	}
}

// waitStatus waits until task id has status want.
func waitStatus(t testing.TB, s *pgstore.Store, id uuid.UUID, want history.Status) *engine.Task {
	t.Helper()
	var task *engine.Task
	waitFor(t, "task "+id.String()+" to be "+string(want), func() bool {
		got, err := s.TaskGetByID(context.Background(), engine.DefaultNamespace, id)
		if err != nil {
			return false
		}
		task = got
		return got.Status == want
	})
	return task
}

// rescueOne runs the rescuer until it has rescued exactly one task: the
// lease it waits for expires by the database clock.
func rescueOne(t testing.TB, s *pgstore.Store) {
	t.Helper()
	total := 0
	waitFor(t, "an expired lease to be rescued", func() bool {
		n, err := engine.RescueExpired(context.Background(), s, 100)
		require.NoError(t, err)
		total += n
		return total > 0
	})
	require.Equal(t, 1, total)
}

// testLogger sends a service's log to the test's log, so a failing test
// shows what its services said and a passing one stays quiet.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}
