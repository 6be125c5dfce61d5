package sqlitestore_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The store counts what it writes into the metrics it is given, as
// engine/pgstore does.
func TestStoreCountsItsWritesInMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := metrics.New(reg, metrics.Opts{})
	require.NoError(t, err)
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "m.db"), Metrics: metrics})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	_, err = s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
		TaskType: "m", TypeVersion: 1, Queue: "q"}})
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"q"},
		Types: []store.TypeKey{{Type: "m", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 1.0, total(t, reg, "cairn_schedule_to_start_seconds"), "the claim's wait observed")

	c := claimed[0]
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
		Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: []byte(`1`)}}})
	require.NoError(t, err)
	require.Equal(t, 1.0, total(t, reg, "cairn_tasks_finished_total"), "one task completed")

	removed, err := maintenance.RemoveFinished(ctx, s, &store.RemoveFinishedParams{Namespace: "default", Before: time.Now().Add(time.Hour), Max: 10})
	require.NoError(t, err)
	require.Equal(t, store.RemoveResult{Tasks: 1, Events: 3}, removed)
	require.Equal(t, 1.0, total(t, reg, "cairn_retention_removed_tasks_total"), "retention's removal counted")
	require.Equal(t, 3.0, total(t, reg, "cairn_retention_removed_events_total"))
}

// total sums the metric called name in reg over its labels: the values
// of counters, the sample counts of histograms.
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// The diagnosis of the hand-built history of storetest, on this store:
// the same figures as PostgreSQL's.
func TestQueueDiagnoseMeasuresHandBuiltHistory(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	storetest.DiagnoseHandBuiltHistory(t, s, func(tasks []storetest.BuiltTask) { insertHistory(t, s, tasks) })
}

// The series of the hand-built history of storetest, on this store: the
// same figures as PostgreSQL's.
func TestQueueSeriesOfHandBuiltHistory(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	storetest.SeriesHandBuiltHistory(t, s, func(tasks []storetest.BuiltTask) { insertHistory(t, s, tasks) })
}

// insertHistory writes tasks straight into the tables, in one transaction,
// with times relative to one now.
func insertHistory(t *testing.T, s *sqlitestore.Store, tasks []storetest.BuiltTask) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UTC()
	ago := func(seconds float64) int64 {
		return now.Add(-time.Duration(seconds * float64(time.Second))).UnixMicro()
	}
	for _, task := range tasks {
		id := uuid.Must(uuid.NewV7()).String()
		var owner, lease any
		if task.Owner != "" {
			owner, lease = task.Owner, ago(-30)
		}
		var key any
		if task.Key != "" {
			key = task.Key
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, namespace, queue, type, type_version, status, run_at, attempt,
			max_attempts, lease_owner, lease_epoch, lease_expires_at, last_seq, created_at, updated_at, fair_at, fairness_key)
			VALUES (?, 'default', ?, ?, 1, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, task.Queue, task.Type, task.Status, ago(task.RunAgo), task.Attempt, owner, task.Attempt, lease,
			len(task.Events), ago(task.Events[0].Ago), ago(task.Events[len(task.Events)-1].Ago), ago(task.RunAgo), key)
		require.NoError(t, err)
		for i, e := range task.Events {
			_, err := tx.ExecContext(ctx, "INSERT INTO events (task_id, seq, type, at, attempt, data) VALUES (?, ?, ?, ?, ?, ?)",
				id, i+1, e.Type, ago(e.Ago), e.Attempt, e.JSON())
			require.NoError(t, err)
		}
	}
	require.NoError(t, tx.Commit())
}

// The store's listener hears in process what PostgreSQL's hears through
// NOTIFY: work ready on a start, a task finished on its terminal event, a
// cancel requested on a running task; once closed, nothing.
func TestListenerHearsTheStoresCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	next := func() store.Notification {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := l.WaitForNotification(waitCtx)
		require.NoError(t, err, "no notification")
		return n
	}
	params := func() *store.TaskStartParams {
		return &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{TaskType: "a", TypeVersion: 1, Queue: "q"}}
	}
	claim := func() *store.ClaimedTask {
		t.Helper()
		claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"q"},
			Types: []store.TypeKey{{Type: "a", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
		claimed := claimedRes.Tasks
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		return claimed[0]
	}

	_, err := s.TaskStart(ctx, params())
	require.NoError(t, err)
	require.True(t, next().Ready, "a start makes work ready")

	c := claim()
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
		Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: []byte(`1`)}}})
	require.NoError(t, err)
	require.Equal(t, store.Notification{Done: []uuid.UUID{c.Task.ID}}, next(), "a terminal event finishes the task")

	_, err = s.TaskStart(ctx, params())
	require.NoError(t, err)
	next()
	c = claim()
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: "default", ID: c.Task.ID, By: "test"})
	require.NoError(t, err)
	require.Equal(t, store.Notification{Cancel: []uuid.UUID{c.Task.ID}}, next(), "a running task's cancel is announced")

	require.NoError(t, l.Close(ctx))
	_, err = s.TaskStart(ctx, params())
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	n, err := l.WaitForNotification(waitCtx)
	require.Error(t, err, "a closed listener hears nothing, got %+v", n)
	require.NoError(t, waitCtx.Err(), "a closed listener says so at once")
}

// A task whose history this process cannot read (an event of a newer
// cairn) is leased as PostgreSQL leases it, with the error for the worker,
// so it does not head every claim after it.
func TestClaimLeasesATaskItCannotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	start := func() uuid.UUID {
		res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
			TaskType: "u", TypeVersion: 1, Queue: "q"}})
		require.NoError(t, err)
		return res.ID
	}
	unreadable := start()
	_, err := s.DB().ExecContext(ctx, `INSERT INTO events (task_id, seq, type, at, attempt, data) VALUES (?, 2, 'from_the_future', 0, 0, '{"v":9}');
		UPDATE tasks SET last_seq = 2 WHERE id = ?`, unreadable.String(), unreadable.String())
	require.NoError(t, err)
	other := start()
	claim := func() *store.ClaimedTask {
		t.Helper()
		claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"q"},
			Types: []store.TypeKey{{Type: "u", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
		claimed := claimedRes.Tasks
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		return claimed[0]
	}
	first := claim()
	require.Equal(t, unreadable, first.Task.ID)
	require.Error(t, first.Err, "the worker is told it cannot run it")
	require.Equal(t, history.StatusRunning, first.Task.Status, "leased, so it waits for its lease to expire")
	require.Equal(t, int64(3), first.Task.LastSeq, "attempt_started appended")
	second := claim()
	require.Equal(t, other, second.Task.ID, "the next claim takes the next task")
	require.NoError(t, second.Err)

	d, err := diagnosis.Diagnose(ctx, s, &store.QueueDiagnoseParams{Namespace: "default", Queue: "q", Window: time.Minute})
	require.NoError(t, err, "a diagnosis leaves out what it cannot read")
	require.Equal(t, 1, d.Now.Inflow, "the readable task's task_scheduled")
}

// A list of ids of any length is one parameter (a JSON array): more ids
// than SQLite binds parameters (32766) read the tasks and events there
// are, by id, once each.
func TestManyIDsReadInOneQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	ps := make([]*store.TaskStartParams, 1000)
	for i := range ps {
		ps[i] = &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{TaskType: "many", TypeVersion: 1, Queue: "q"}}
	}
	started, err := s.TaskStartMany(ctx, ps)
	require.NoError(t, err)
	var ids []uuid.UUID
	for i, r := range started {
		ids = append(ids, r.ID)
		if i%10 == 0 {
			ids = append(ids, r.ID) // a repeat
		}
	}
	for len(ids) < 40000 {
		ids = append(ids, uuid.Must(uuid.NewV7())) // no such task
	}

	want := make([]string, len(started))
	for i, r := range started {
		want[i] = r.ID.String()
	}
	slices.Sort(want)

	tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
	require.NoError(t, err)
	got := make([]string, len(tasks))
	for i, task := range tasks {
		got[i] = task.ID.String()
	}
	require.Equal(t, want, got, "each task once, by id")
	events, err := s.EventList(ctx, store.EventListAll("", ids...))
	require.NoError(t, err)
	require.Len(t, events, len(started))
	for _, r := range started {
		require.Len(t, events[r.ID], 1, "task_scheduled, once")
	}
}
