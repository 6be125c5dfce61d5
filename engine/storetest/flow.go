package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// flowTests: what a claim tells its worker about the work it left (held
// back by a limit, due later), and a processor that keeps a limited queue
// busy and wakes for timers and retries with no poll to fall back on.
var flowTests = []conformanceTest{
	{"ClaimSaysWhenALimitHeldDueWorkBack", testClaimHeldBack},
	{"ClaimSaysWhenMoreIsDue", testClaimNextAt},
	{"ClaimSaysWhenARateLimitHasATokenAgain", testClaimNextToken},
	{"FinishedTaskOfALimitedQueueWakesListeners", testFreedSlotNotifies},
	{"RaisedLimitWakesListeners", testRaisedLimitNotifies},
	{"ListenerProbeComesBackToItsListenerOnly", testListenerProbe},
	{"WorkerKeepsALimitedQueueBusyWithoutPolling", testLimitedQueueBusy},
	{"FreedSlotWakesAnotherWorkerWithoutPolling", testFreedSlotWakesOtherWorker},
	{"WorkerWakesForItsTimersAndRetriesWithoutPolling", testOwnTimersWithoutPolling},
	{"WorkerWakesForADelayedStartWithoutPolling", testDelayedStartWithoutPolling},
}

// noPoll is a poll interval no test waits out: a processor that relies on
// polling hangs into the test's deadline and fails it.
const noPoll = time.Hour

func testClaimHeldBack(t *testing.T, s store.Store) {
	ctx := testContext(t)
	res, err := s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Empty(t, res.Tasks)
	require.False(t, res.HeldBack, "an empty store holds nothing back")
	require.True(t, res.NextAt.IsZero(), "an empty store knows of nothing due")

	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: 1}))
	for range 3 {
		start(t, s, spec{})
	}
	res, err = s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Len(t, res.Tasks, 1, "the queue's one slot")
	require.True(t, res.HeldBack, "two due tasks wait for the slot: the queue is not empty")

	res, err = s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Empty(t, res.Tasks)
	require.True(t, res.HeldBack, "still held back while the slot is taken")

	// Another queue, unlimited, drained: nothing held back.
	start(t, s, spec{Queue: "other"})
	p := claimParams("w", 5, time.Minute)
	p.Queues = []string{"other"}
	res, err = s.TaskClaim(ctx, p)
	require.NoError(t, err)
	require.Len(t, res.Tasks, 1)
	require.False(t, res.HeldBack, "an unlimited queue's claim took all that was due")
}

func testClaimNextAt(t *testing.T, s store.Store) {
	ctx := testContext(t)
	soon := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	start(t, s, spec{RunAt: soon.Add(time.Hour)})
	start(t, s, spec{RunAt: soon})
	start(t, s, spec{RunAt: soon, Queue: "not-claimed"}) // outside the claim's queues
	start(t, s, spec{})
	start(t, s, spec{})

	full, err := s.TaskClaim(ctx, claimParams("w", 1, time.Minute))
	require.NoError(t, err)
	require.Len(t, full.Tasks, 1)
	require.True(t, full.NextAt.IsZero(), "a full claim reads no outlook: more may be due at once")

	res, err := s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Len(t, res.Tasks, 1, "the other due task")
	require.True(t, soon.Equal(res.NextAt), "next due at the earliest future run time %s, got %s", soon, res.NextAt)
	require.False(t, res.HeldBack)

	res, err = s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Empty(t, res.Tasks)
	require.True(t, soon.Equal(res.NextAt), "an empty claim knows it too, got %s", res.NextAt)
}

func testClaimNextToken(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: store.DefaultNamespace, TaskType: defaultType,
		MaxStarts: 1, Per: time.Hour}))
	start(t, s, spec{})
	start(t, s, spec{})
	before := time.Now()
	res, err := s.TaskClaim(ctx, claimParams("w", 5, time.Minute))
	require.NoError(t, err)
	require.Len(t, res.Tasks, 1, "one start per hour")
	require.False(t, res.HeldBack, "a rate limit is not a slot to wait for")
	require.WithinDuration(t, before.Add(time.Hour), res.NextAt, time.Minute, "the next token comes in an hour")
}

func testFreedSlotNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: 1}))
	start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	complete(t, s, ct)
	for {
		note, err := l.WaitForNotification(ctx) // the test's deadline ends a wait for nothing
		require.NoError(t, err)
		if note.Ready {
			return
		}
	}
}

// testRaisedLimitNotifies: a queue's limit raised lets held-back tasks
// run, so workers hear of it rather than wait for their poll.
func testRaisedLimitNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	limit := func(n int) error {
		return s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: n})
	}
	require.NoError(t, limit(1))
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	require.NoError(t, limit(2))
	for {
		note, err := l.WaitForNotification(ctx) // the test's deadline ends a wait for nothing
		require.NoError(t, err)
		if note.Ready {
			return
		}
	}
}

func testLimitedQueueBusy(t *testing.T, s store.Store) {
	const tasks = 12
	require.NoError(t, s.QueueSet(testContext(t), &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: 3}))
	startMany(t, s, tasks, time.Time{})
	h := &busyHandler{d: 20 * time.Millisecond, finished: newCountdown(tasks)}
	// No notifier: the worker's own freed slots must bring the next claims.
	runWorker(t, s, h, workerOpts{Concurrency: 10, PollInterval: noPoll, NoNotifier: true})
	waitDone(t, h.finished.done, "every task of the limited queue to run, with no poll")
	waitAllCompleted(t, s)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.LessOrEqual(t, h.peak, 3, "the queue's limit held")
}

func testFreedSlotWakesOtherWorker(t *testing.T, s store.Store) {
	require.NoError(t, s.QueueSet(testContext(t), &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: 1}))
	start(t, s, spec{Type: "a"})
	start(t, s, spec{Type: "b"})
	done := newCountdown(2)
	// Each worker runs one type: the one left waiting holds no slot that
	// could free, so only the other's announcement can wake it.
	for _, typ := range []string{"a", "b"} {
		h := &busyHandler{d: 20 * time.Millisecond, finished: done}
		runWorker(t, s, h, workerOpts{Types: []store.TypeKey{{Type: typ, Version: 1}}, Concurrency: 5, PollInterval: noPoll})
	}
	waitDone(t, done.done, "both workers' tasks to run through the one slot, with no poll")
	waitAllCompleted(t, s)
}

func testOwnTimersWithoutPolling(t *testing.T, s store.Store) {
	l := &lateness{finished: newCountdown(2)}
	sleep := store.TypeKey{Type: "sleeps", Version: 1}
	retry := store.TypeKey{Type: "retries", Version: 1}
	start(t, s, spec{Type: sleep.Type})
	start(t, s, spec{Type: retry.Type})
	runWorker(t, s, sleepOnce(50*time.Millisecond, l), workerOpts{Types: []store.TypeKey{sleep}, PollInterval: noPoll, NoNotifier: true})
	runWorker(t, s, failOnce(50*time.Millisecond, l), workerOpts{Types: []store.TypeKey{retry}, PollInterval: noPoll, NoNotifier: true})
	waitDone(t, l.finished.done, "a timer of 50ms and a retry after 50ms to run, with no poll")
	waitAllCompleted(t, s)
}

func testDelayedStartWithoutPolling(t *testing.T, s store.Store) {
	startMany(t, s, 2, time.Now().Add(50*time.Millisecond))
	h := &busyHandler{finished: newCountdown(2)}
	// Started before the worker: its first claim's outlook is all it has.
	runWorker(t, s, h, workerOpts{PollInterval: noPoll, NoNotifier: true})
	waitDone(t, h.finished.done, "tasks due in 50ms to run, with no poll")
	waitAllCompleted(t, s)
}

// waitAllCompleted waits until every task in s is completed: a handler
// counts itself done before its outcome is written.
func waitAllCompleted(t *testing.T, s store.Store) {
	t.Helper()
	for _, id := range allTaskIDs(t, s) {
		waitFor(t, "task "+id.String()+" to be completed", func() bool {
			return getTask(t, s, id).Status == history.StatusCompleted
		})
	}
}

// testListenerProbe: a probe comes back to the listener that sent it, with
// its token, and to no other listener (the notifier's liveness check).
func testListenerProbe(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect := func() store.Listener {
		l := s.NewListener()
		require.NoError(t, l.Connect(ctx))
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	prober, other := connect(), connect()
	require.NoError(t, prober.Probe(ctx, "7"))
	note, err := prober.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"7"}, note.Probes)

	// The other listener hears the next task start, and no probe before it.
	require.NoError(t, prober.Probe(ctx, "8"))
	start(t, s, spec{})
	for {
		note, err := other.WaitForNotification(ctx)
		require.NoError(t, err)
		require.Empty(t, note.Probes, "another listener's probe arrived")
		if note.Ready {
			return
		}
	}
}
