package enginetest

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestKey is the type key of tasks started with default [TaskOpts].
var TestKey = store.TypeKey{Type: "test", Version: 1}

// WaitTimeout bounds every wait for a condition; conditions normally hold
// within milliseconds, so reaching it means the condition never will.
const WaitTimeout = 15 * time.Second

// PollInterval is how often waits re-check the database.
const PollInterval = 10 * time.Millisecond

// ClaimParams is a claim of default test tasks by owner.
func ClaimParams(owner string, max int, ttl time.Duration) *store.TaskClaimParams {
	return &store.TaskClaimParams{
		Namespace: store.DefaultNamespace, Queues: []string{"default"}, Types: []store.TypeKey{TestKey},
		Owner: owner, Max: max, LeaseTTL: ttl,
	}
}

// Claim runs the claim p and fails the test on an error.
func Claim(tb testing.TB, s store.Store, p *store.TaskClaimParams) []*store.ClaimedTask {
	tb.Helper()
	res, err := s.TaskClaim(context.Background(), p)
	require.NoError(tb, err)
	return res.Tasks
}

// ClaimOne claims exactly one default test task for owner.
func ClaimOne(tb testing.TB, s store.Store, owner string, ttl time.Duration) *store.ClaimedTask {
	tb.Helper()
	claimed := Claim(tb, s, ClaimParams(owner, 1, ttl))
	require.Len(tb, claimed, 1)
	return claimed[0]
}

// AppendFenced appends payloads for ct's attempt, fenced by its epoch.
func AppendFenced(ctx context.Context, s store.Store, ct *store.ClaimedTask, payloads ...history.Payload) (history.State, error) {
	return s.EventAppend(ctx, &store.EventAppendParams{
		TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch,
		Attempt: ct.State.Attempt, Payloads: payloads,
	})
}

// StartChildren starts children of a running parent over s, a store or a
// transaction of one, as the runtime does (engine/internal/requests'
// StartChildren): for the tests outside engine/, which cannot import it.
func StartChildren(ctx context.Context, s store.Executor, p *store.ChildStartParams) (store.ChildStartResult, error) {
	return requests.StartChildren(ctx, s, p)
}

// Complete completes ct's attempt.
func Complete(tb testing.TB, s store.Store, ct *store.ClaimedTask) {
	tb.Helper()
	_, err := AppendFenced(context.Background(), s, ct, history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)})
	require.NoError(tb, err)
}

// GetTask reads task id of the default namespace.
func GetTask(tb testing.TB, s store.Store, id uuid.UUID) *store.Task {
	tb.Helper()
	task, err := s.TaskGet(context.Background(), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	require.NoError(tb, err)
	return task
}

// Events reads task id's events.
func Events(tb testing.TB, s store.Store, id uuid.UUID) []history.Event {
	tb.Helper()
	evs, err := store.TaskEvents(context.Background(), s, "", id)
	require.NoError(tb, err)
	return evs
}

// CountRows counts the rows of one of the store's tables.
func CountRows(tb testing.TB, s *pgstore.Store, table string) int {
	tb.Helper()
	var n int
	err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+TableName(s, table)).Scan(&n)
	require.NoError(tb, err)
	return n
}

// TableName is the quoted, schema-qualified name of one of the store's
// tables.
func TableName(s *pgstore.Store, table string) string {
	return pgx.Identifier{s.Schema(), table}.Sanitize()
}

// WaitFor polls cond on the test's goroutine (so cond may use require)
// until it holds, failing the test after [WaitTimeout].
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	ticker := time.NewTicker(PollInterval)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", WaitTimeout, what)
		}
		<-ticker.C
	}
}

// WaitStatus waits until task id has status want.
func WaitStatus(tb testing.TB, s store.Store, id uuid.UUID, want history.Status) *store.Task {
	tb.Helper()
	var task *store.Task
	WaitFor(tb, "task "+id.String()+" to be "+string(want), func() bool {
		got, err := s.TaskGet(context.Background(), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
		if err != nil {
			return false
		}
		task = got
		return got.Status == want
	})
	return task
}

// RescueOne runs the rescue until it has rescued exactly one task: the
// lease it waits for expires by the store's clock.
func RescueOne(tb testing.TB, s store.Store) {
	tb.Helper()
	total := 0
	WaitFor(tb, "an expired lease to be rescued", func() bool {
		n, err := maintenance.RescueExpired(context.Background(), s, 100)
		require.NoError(tb, err)
		total += n
		return total > 0
	})
	require.Equal(tb, 1, total)
}

// RemoveFinished removes finished tasks as retention does, in one
// transaction of s (engine/internal/maintenance.RemoveFinished): for tests
// outside engine, which cannot import the runtime's packages.
func RemoveFinished(ctx context.Context, s store.Executor, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	return maintenance.RemoveFinished(ctx, s, p)
}

// Logger sends a service's log to the test's log, so a failing test shows
// what its services said and a passing one stays quiet.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Logf("%s", p)
	return len(p), nil
}

// FillEventRanges starts tasks with inputs of some 1.5 KB until the
// events of s fill at least one of events_at_brin_idx's ranges (32 pages;
// the last, partial range is summarized only once full), and returns how
// many full ranges there are.
func FillEventRanges(tb testing.TB, s *pgstore.Store) int {
	tb.Helper()
	input := json.RawMessage(`{"pad":"` + strings.Repeat("0123456789abcdef", 90) + `"}`)
	StartTasks(tb, s, 300, &TaskOpts{Input: input})
	var pages int
	require.NoError(tb, s.Pool().QueryRow(context.Background(), "SELECT pg_relation_size($1::regclass) / 8192",
		TableName(s, "events")).Scan(&pages))
	require.GreaterOrEqual(tb, pages, 32, "events fill a range")
	return pages / 32
}
