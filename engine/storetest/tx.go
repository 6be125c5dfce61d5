package storetest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// Begin opens a transaction on s: [store.Executor.Begin], or another way
// a driver offers (pgstore's WithTx over a pgx transaction of the
// caller's).
type Begin func(ctx context.Context, s store.Store) (store.Tx, error)

// beginOnStore is the seam's own Begin.
func beginOnStore(ctx context.Context, s store.Store) (store.Tx, error) { return s.Begin(ctx) }

// txTest is a conformance test of transactions, given how to open one.
type txTest struct {
	name string
	run  func(t *testing.T, s store.Store, begin Begin)
}

// txTests: the seam's transaction (store.Tx): what it writes is its own
// until it commits, gone when it rolls back, and announced after the
// commit only.
var txTests = []txTest{
	{"TxWritesAreSeenInsideAndNotOutsideUntilCommit", testTxVisibility},
	{"TxRollbackLeavesNothing", testTxRollback},
	{"TxClaimAndCompleteCommitTogether", testTxClaimAndComplete},
	{"TxWakesListenersAfterCommitOnly", testTxWakeUpsAfterCommit},
	{"TxRolledBackWakesNobody", testTxRollbackWakesNobody},
	{"NestedTxCommitsAndRollsBackItsOwnWrites", testTxNested},
	{"TxRefusalsLeaveItUsable", testTxRefusals},
	{"TxChildrenStartedRollBackWithIt", testTxChildren},
}

// transactionTests are txTests over the seam's own Begin, for [Run].
func transactionTests() []conformanceTest {
	out := make([]conformanceTest, len(txTests))
	for i, tc := range txTests {
		out[i] = conformanceTest{tc.name, func(t *testing.T, s store.Store) { tc.run(t, s, beginOnStore) }}
	}
	return out
}

// RunTransactions runs the conformance tests of transactions against
// stores made by newStore (each call a fresh, empty, migrated store), with
// every transaction opened by begin. [Run] runs them with the seam's own
// Begin; a driver that runs its statements in transactions of another
// origin runs them again with its own.
func RunTransactions(t *testing.T, newStore func(t *testing.T) store.Store, begin Begin) {
	t.Helper()
	for _, tc := range txTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			tc.run(t, s, begin)
			if !t.Failed() {
				requireReplayMatches(t, s)
			}
		})
	}
}

// beginTx opens a transaction with begin, rolled back when the test ends
// (a no-op once it has committed).
func beginTx(t *testing.T, s store.Store, begin Begin) store.Tx {
	t.Helper()
	tx, err := begin(testContext(t), s)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// requireUnseen checks that a read on the store, outside the transaction
// that started task id, does not see it: PostgreSQL answers that there is
// no such task; SQLite's reader waits for the store's one connection,
// which the transaction holds, until its context ends.
func requireUnseen(t *testing.T, s store.Store, id uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	require.Error(t, err, "a task started in a transaction is seen outside it before the commit")
	require.True(t, errors.Is(err, store.ErrNotFound) || errors.Is(err, context.DeadlineExceeded),
		"not found, or the reader waits for the transaction to end: %v", err)
}

// requireGone checks that the store has no task id.
func requireGone(t *testing.T, s store.Executor, id uuid.UUID) {
	t.Helper()
	_, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	requireIs(t, err, store.ErrNotFound, "task %s", id)
}

// listen connects a listener on s, closed when the test ends.
func listen(t *testing.T, s store.Store) store.Listener {
	t.Helper()
	l := s.NewListener()
	require.NoError(t, l.Connect(testContext(t)))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// requireQuiet probes l and fails if a wake-up reaches it before the probe
// comes back: nothing committed since it connected announced work.
func requireQuiet(t *testing.T, l store.Listener, token string) {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, l.Probe(ctx, token))
	for {
		n, err := l.WaitForNotification(ctx)
		require.NoError(t, err)
		require.False(t, n.Ready, "work announced ready before the commit")
		require.Empty(t, n.Done, "tasks announced finished before the commit")
		require.Empty(t, n.Cancel, "cancels announced before the commit")
		if slices.Contains(n.Probes, token) {
			return
		}
	}
}

// waitWoken waits until l has heard that work is ready and that the tasks
// of done finished (the test's deadline ends a wait for nothing).
func waitWoken(t *testing.T, l store.Listener, done ...uuid.UUID) {
	t.Helper()
	ctx := testContext(t)
	ready, finished := false, map[uuid.UUID]bool{}
	for !ready || len(finished) < len(done) {
		n, err := l.WaitForNotification(ctx)
		require.NoError(t, err)
		ready = ready || n.Ready
		for _, id := range n.Done {
			if slices.Contains(done, id) {
				finished[id] = true
			}
		}
	}
}

func testTxVisibility(t *testing.T, s store.Store, begin Begin) {
	tx := beginTx(t, s, begin)
	id := start(t, tx, spec{Input: json.RawMessage(`{"n":1}`)})
	require.Equal(t, history.StatusPending, getTask(t, tx, id).Status, "the transaction sees its own start")
	require.Equal(t, []history.Type{history.TaskScheduled}, eventTypes(t, tx, id))
	requireUnseen(t, s, id)

	require.NoError(t, tx.Commit(testContext(t)))
	require.Equal(t, history.StatusPending, getTask(t, s, id).Status, "committed")
	require.NoError(t, tx.Rollback(testContext(t)), "a rollback after the commit is a no-op")
	require.Error(t, tx.Commit(testContext(t)), "a transaction commits once")
}

func testTxRollback(t *testing.T, s store.Store, begin Begin) {
	ctx := testContext(t)
	kept := start(t, s, spec{})
	tx := beginTx(t, s, begin)
	res, err := tx.TaskStartMany(ctx, []*store.TaskStartParams{spec{}.params(), spec{IdempotencyKey: "once"}.params()})
	require.NoError(t, err)
	// The committed task: on PostgreSQL the transaction's clock stopped
	// when it began, before its own starts were due.
	ct := claimOne(t, tx, "w", time.Minute)
	require.Equal(t, kept, ct.Task.ID)
	complete(t, tx, ct)
	require.NoError(t, tx.ScheduleCreate(ctx, schedule(store.DefaultNamespace, "nightly")))
	require.NoError(t, tx.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "llm", Concurrency: 2}))

	require.NoError(t, tx.Rollback(ctx))
	require.Error(t, tx.Commit(ctx), "a rolled back transaction does not commit")
	for _, r := range res {
		requireGone(t, s, r.ID)
	}
	require.Equal(t, 1, taskCount(t, s))
	task := getTask(t, s, kept)
	require.Equal(t, history.StatusPending, task.Status, "the claim was rolled back")
	require.Equal(t, int64(1), task.LastSeq)
	schedules, err := s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Empty(t, schedules)
	queues, err := s.QueueList(ctx, &store.QueueListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	for _, q := range queues {
		require.NotEqual(t, "llm", q.Name, "the queue setting was rolled back")
	}
	again, err := s.TaskStart(ctx, spec{IdempotencyKey: "once"}.params())
	require.NoError(t, err)
	require.False(t, again.Existing, "the rolled back start's key is free")
	claimOne(t, s, "w", time.Minute)
}

func testTxClaimAndComplete(t *testing.T, s store.Store, begin Begin) {
	id := start(t, s, spec{})
	tx := beginTx(t, s, begin)
	ct := claimOne(t, tx, "w", time.Minute)
	require.Equal(t, id, ct.Task.ID)
	st := complete(t, tx, ct)
	require.Equal(t, history.StatusCompleted, getTask(t, tx, id).Status)
	require.NoError(t, tx.Commit(testContext(t)))
	task := getTask(t, s, id)
	require.Equal(t, history.StatusCompleted, task.Status)
	require.Equal(t, st.LastSeq, task.LastSeq)
}

func testTxWakeUpsAfterCommit(t *testing.T, s store.Store, begin Begin) {
	start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	l := listen(t, s)
	tx := beginTx(t, s, begin)
	complete(t, tx, ct)
	start(t, tx, spec{})
	requireQuiet(t, l, "before-commit")
	require.NoError(t, tx.Commit(testContext(t)))
	waitWoken(t, l, ct.Task.ID)
}

func testTxRollbackWakesNobody(t *testing.T, s store.Store, begin Begin) {
	start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	l := listen(t, s)
	tx := beginTx(t, s, begin)
	complete(t, tx, ct)
	start(t, tx, spec{})
	require.NoError(t, tx.Rollback(testContext(t)))
	requireQuiet(t, l, "after-rollback")
	require.Equal(t, history.StatusRunning, getTask(t, s, ct.Task.ID).Status)
}

func testTxNested(t *testing.T, s store.Store, begin Begin) {
	ctx := testContext(t)
	l := listen(t, s)
	tx := beginTx(t, s, begin)
	outer := start(t, tx, spec{})

	undone, err := tx.Begin(ctx)
	require.NoError(t, err)
	dropped := start(t, undone, spec{})
	require.Equal(t, history.StatusPending, getTask(t, undone, dropped).Status)
	require.NoError(t, undone.Rollback(ctx))
	requireGone(t, tx, dropped)
	require.Equal(t, history.StatusPending, getTask(t, tx, outer).Status, "the nested rollback kept the outer writes")

	kept, err := tx.Begin(ctx)
	require.NoError(t, err)
	inner := start(t, kept, spec{})
	require.NoError(t, kept.Commit(ctx))
	require.Equal(t, history.StatusPending, getTask(t, tx, inner).Status, "the nested commit is the outer transaction's")
	requireQuiet(t, l, "nested-commit")

	require.NoError(t, tx.Commit(ctx))
	waitWoken(t, l)
	getTask(t, s, outer)
	getTask(t, s, inner)
	requireGone(t, s, dropped)
	require.Equal(t, 2, taskCount(t, s))
}

func testTxRefusals(t *testing.T, s store.Store, begin Begin) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "llm", MaxWaiting: 1}))
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	tx := beginTx(t, s, begin)

	_, err := tx.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch + 1,
		Attempt: ct.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{}}})
	requireIs(t, err, store.ErrFenced)
	_, err = tx.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: uuid.New()})
	requireIs(t, err, store.ErrNotFound)
	start(t, tx, spec{Queue: "llm"})
	_, err = tx.TaskStart(ctx, spec{Queue: "llm"}.params())
	requireIs(t, err, store.ErrQueueFull)
	complete(t, tx, ct)
	require.NoError(t, tx.Commit(ctx))

	require.Equal(t, history.StatusCompleted, getTask(t, s, id).Status)
	require.Equal(t, 2, taskCount(t, s), "the refused start wrote nothing, and the rest committed")
}

func testTxChildren(t *testing.T, s store.Store, begin Begin) {
	start(t, s, spec{Type: parentType})
	tx := beginTx(t, s, begin)
	parent, res := startChildren(t, tx, 2)
	for _, id := range res.IDs {
		require.Equal(t, history.StatusPending, getTask(t, tx, id).Status)
	}
	require.NoError(t, tx.Rollback(testContext(t)))
	for _, id := range res.IDs {
		requireGone(t, s, id)
	}
	require.Equal(t, history.StatusPending, getTask(t, s, parent.Task.ID).Status, "the parent's claim was rolled back")
	require.Len(t, events(t, s, parent.Task.ID), 1)
}

// observerTests: what a store's Observer counts of a transaction's writes,
// each run on a store made to count into a recording observer.
var observerTests = []struct {
	name string
	run  func(t *testing.T, s store.Store, obs *recordingObserver)
}{
	{"ObserverCountsATxAtItsCommit", testObserverAtCommit},
	{"ObserverCountsNothingOfARolledBackTx", testObserverNotAtRollback},
}

// RunObserver runs the tests of what a store counts into its
// [store.Observer] against stores made by newStore with the observer
// given; each call must return a fresh, empty, migrated store.
func RunObserver(t *testing.T, newStore func(t *testing.T, obs store.Observer) store.Store) {
	t.Helper()
	for _, tc := range observerTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &recordingObserver{}
			s := newStore(t, obs)
			tc.run(t, s, obs)
			if !t.Failed() {
				requireReplayMatches(t, s)
			}
		})
	}
}

// recordingObserver records the writes a store counts.
type recordingObserver struct {
	mu       sync.Mutex
	appended []history.Type // the last event type of each append counted
	claimed  int
}

func (o *recordingObserver) ObserveAppended(p *store.EventAppendParams, _ history.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.appended = append(o.appended, p.Payloads[len(p.Payloads)-1].EventType())
}

func (o *recordingObserver) ObserveClaimed(claimed []*store.ClaimedTask) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed += len(claimed)
}

func (o *recordingObserver) ObserveScheduleSkipped(store.ScheduleFiring) {}
func (o *recordingObserver) ObserveRemoved(string, store.RemoveResult)   {}
func (o *recordingObserver) counts() (appended []history.Type, claimed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.appended), o.claimed
}

func testObserverAtCommit(t *testing.T, s store.Store, obs *recordingObserver) {
	start(t, s, spec{})
	tx := beginTx(t, s, beginOnStore)
	complete(t, tx, claimOne(t, tx, "w", time.Minute))
	appended, claimed := obs.counts()
	require.Empty(t, appended, "nothing counted before the commit")
	require.Zero(t, claimed, "nothing counted before the commit")
	require.NoError(t, tx.Commit(testContext(t)))
	appended, claimed = obs.counts()
	require.Equal(t, []history.Type{history.TaskCompleted}, appended)
	require.Equal(t, 1, claimed)
}

func testObserverNotAtRollback(t *testing.T, s store.Store, obs *recordingObserver) {
	start(t, s, spec{})
	tx := beginTx(t, s, beginOnStore)
	nested, err := tx.Begin(testContext(t))
	require.NoError(t, err)
	complete(t, nested, claimOne(t, nested, "w", time.Minute))
	require.NoError(t, nested.Commit(testContext(t)))
	require.NoError(t, tx.Rollback(testContext(t)))
	appended, claimed := obs.counts()
	require.Empty(t, appended)
	require.Zero(t, claimed)
}
