package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// signalTests: signals sent to tasks (requests.Signal, engine.SignalTask,
// over the store's statements) and the waits they end.
var signalTests = []conformanceTest{
	{"SignalIsAppendedAndKeepsTheStatus", testSignalKeepsStatus},
	{"SignalWithSeenDedupIDWritesNothing", testSignalDedup},
	{"SignalToFinishedTaskIsRefused", testSignalFinished},
	{"SignalByIdempotencyKey", testSignalByKey},
	{"SignalRefusals", testSignalRefusals},
	{"WaitingTaskIsNotClaimableUntilItsSignal", testSignalWakesWait},
	{"SignalOfAnotherNameLeavesTheWait", testSignalOtherName},
	{"SignalMakingATaskDueNotifies", testSignalNotifies},
	{"WaitIsClaimableAtItsDeadline", testWaitDeadline},
	{"QueueOfTasksWaitingOnSignalsIsHealthy", testWaitingQueueHealthy},
	{"SignalForOneWaitOnlyWhileItWaits", testSignalForWait},
	{"SignalIsDecidedAsTheReplayWouldDecideIt", testSignalAsReplay},
	{"SignalLookupReadsWhatItIsAsked", testSignalLookup},
}

// signal sends the signal name with payload to task id of the default
// namespace.
func signal(t *testing.T, s store.Store, id uuid.UUID, name, payload, dedupID string) (store.SignalResult, error) {
	t.Helper()
	var raw json.RawMessage
	if payload != "" {
		raw = json.RawMessage(payload)
	}
	return requests.Signal(testContext(t), s, &store.TaskSignalParams{
		Namespace: store.DefaultNamespace, TaskID: id, Name: name, Payload: raw, Sender: "ops", DedupID: dedupID,
	})
}

// waitForSignal claims a default task and ends its attempt waiting for
// the signal name until deadline, as a workflow's receive does.
func waitForSignal(t *testing.T, s store.Store, name string, deadline time.Time) (*store.ClaimedTask, history.State) {
	t.Helper()
	ct := claimOne(t, s, "w", time.Minute)
	st, err := appendFenced(t, s, ct, history.WaitStartedData{Name: name, Position: 0, Deadline: deadline})
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, st.Status)
	require.Empty(t, st.Lease.Owner, "the wait ends the attempt")
	return ct, st
}

func testSignalKeepsStatus(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	res, err := signal(t, s, id, "approval", `{"ok":true}`, "d-1")
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, id, res.TaskID)
	require.Equal(t, history.StatusPending, res.State.Status)
	evs := events(t, s, id)
	require.Len(t, evs, 2)
	got := evs[1].Data.(history.SignalReceivedData)
	require.Equal(t, "approval", got.Name)
	requireJSONEqual(t, json.RawMessage(`{"ok":true}`), got.Payload)
	require.Equal(t, "ops", got.Sender)
	require.Equal(t, "d-1", got.DedupID)
	require.Zero(t, evs[1].Attempt, "a signal belongs to no attempt")

	// A running task keeps running, and keeps its lease.
	ct := claimOne(t, s, "w", time.Minute)
	res, err = signal(t, s, id, "approval", "", "")
	require.NoError(t, err)
	require.Equal(t, history.StatusRunning, res.State.Status)
	task := getTask(t, s, id)
	require.Equal(t, history.StatusRunning, task.Status)
	require.Equal(t, "w", task.LeaseOwner)
	require.Equal(t, ct.State.Lease.Epoch, task.LeaseEpoch)
	require.Len(t, stateOf(t, s, id).Signals, 2)
}

func testSignalDedup(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	first, err := signal(t, s, id, "approval", `1`, "once")
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := signal(t, s, id, "approval", `2`, "once")
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the dedup id is in the history already")
	require.Equal(t, first.State.LastSeq, again.State.LastSeq)
	require.Equal(t, []history.Type{history.TaskScheduled, history.SignalReceived}, eventTypes(t, s, id))
	// No dedup id: every send is a signal of its own.
	for range 2 {
		res, err := signal(t, s, id, "approval", `3`, "")
		require.NoError(t, err)
		require.False(t, res.Duplicate)
	}
	require.Len(t, stateOf(t, s, id).Signals, 3)
}

func testSignalFinished(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	_, err := signal(t, s, id, "approval", `1`, "d")
	requireIs(t, err, store.ErrTaskState)
	require.Contains(t, err.Error(), "completed")
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskCompleted}, eventTypes(t, s, id),
		"nothing written")
}

func testSignalByKey(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{IdempotencyKey: "order-7"})
	other := start(t, s, spec{Namespace: "other", IdempotencyKey: "order-7"})
	res, err := requests.Signal(ctx, s, &store.TaskSignalParams{Namespace: store.DefaultNamespace, IdempotencyKey: "order-7", Name: "approval"})
	require.NoError(t, err)
	require.Equal(t, id, res.TaskID)
	require.Len(t, stateOf(t, s, id).Signals, 1)
	require.Empty(t, stateOf(t, s, other).Signals, "a key is told apart per namespace")

	_, err = requests.Signal(ctx, s, &store.TaskSignalParams{Namespace: store.DefaultNamespace, IdempotencyKey: "order-8", Name: "approval"})
	requireIs(t, err, store.ErrNotFound)
}

func testSignalRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	_, err := signal(t, s, uuid.New(), "approval", "", "")
	requireIs(t, err, store.ErrNotFound, "no such task")
	_, err = requests.Signal(ctx, s, &store.TaskSignalParams{Namespace: "other", TaskID: id, Name: "approval"})
	requireIs(t, err, store.ErrNotFound, "the task is in another namespace")
	for _, p := range []*store.TaskSignalParams{
		{Namespace: store.DefaultNamespace, TaskID: id},                                                  // no name
		{Namespace: store.DefaultNamespace, Name: "approval"},                                            // no task
		{TaskID: id, Name: "approval"},                                                                   // no namespace
		{Namespace: store.DefaultNamespace, TaskID: id, Name: "approval", Payload: json.RawMessage(`{`)}, // not JSON
	} {
		_, err := requests.Signal(ctx, s, p)
		require.Error(t, err, "%+v", p)
	}
	require.Equal(t, []history.Type{history.TaskScheduled}, eventTypes(t, s, id), "nothing written")
}

func testSignalWakesWait(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	require.Empty(t, claim(t, s, claimParams("w2", 10, time.Minute)), "a waiting task is not claimable")

	res, err := signal(t, s, id, "approval", `"yes"`, "")
	require.NoError(t, err)
	require.Nil(t, res.State.Wait, "the signal ends the wait")
	require.Equal(t, history.StatusPending, res.State.Status)
	task := getTask(t, s, id)
	require.Equal(t, res.State.RunAt, task.RunAt, "due at the signal's time")
	require.False(t, task.RunAt.After(time.Now()), "due at once")
	ct := claimWhenDue(t, s, claimParams("w2", 10, time.Minute))
	require.Equal(t, id, ct.Task.ID)
	require.Len(t, ct.State.Signals, 1, "the claim's state holds the signal")
	require.Equal(t, []history.Wait{{Position: 0, Name: "approval", Deadline: ct.State.Waits[0].Deadline}}, ct.State.Waits)
}

func testSignalOtherName(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	_, before := waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	res, err := signal(t, s, id, "rejection", "", "")
	require.NoError(t, err)
	require.NotNil(t, res.State.Wait, "still waiting for its own name")
	require.Equal(t, before.RunAt, getTask(t, s, id).RunAt)
	require.Empty(t, claim(t, s, claimParams("w2", 10, time.Minute)))
}

func testSignalNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	_, err := signal(t, s, id, "approval", "", "")
	require.NoError(t, err)
	for {
		note, err := l.WaitForNotification(ctx) // the test's deadline ends a wait for nothing
		require.NoError(t, err)
		if note.Ready {
			return
		}
	}
}

func testWaitDeadline(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	waitForSignal(t, s, "approval", time.Now().Add(50*time.Millisecond))
	ct := claimWhenDue(t, s, claimParams("w2", 10, time.Minute))
	require.Equal(t, id, ct.Task.ID)
	require.NotNil(t, ct.State.Wait, "woken by the deadline, the receive still waits")
	st, err := appendFenced(t, s, ct, history.WaitTimedOutData{Name: "approval", Position: 0}, history.TaskCompletedData{})
	require.NoError(t, err)
	require.True(t, st.Waits[0].TimedOut)
	// A signal after the timeout is kept, for a later receive, until the
	// task ends.
	_, err = signal(t, s, id, "approval", "", "")
	requireIs(t, err, store.ErrTaskState)
}

// testWaitingQueueHealthy: tasks waiting for a signal are not backlog. A
// queue of 50 of them (pending, run at their waits' deadline an hour
// away) has nothing due, and its diagnosis is healthy with no causes.
func testWaitingQueueHealthy(t *testing.T, s store.Store) {
	ctx := testContext(t)
	const n = 50
	for range n {
		start(t, s, spec{})
	}
	claimed := claim(t, s, claimParams("w", n, time.Minute))
	require.Len(t, claimed, n)
	deadline := plan.Now(nil).Add(time.Hour)
	for _, ct := range claimed {
		st, err := appendFenced(t, s, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: deadline})
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, st.Status)
	}
	require.Empty(t, claim(t, s, claimParams("w2", n, time.Minute)), "no waiting task is due")

	stats, err := s.QueueStatsList(ctx, &store.QueueStatsListParams{Namespace: store.DefaultNamespace, Window: time.Hour})
	require.NoError(t, err)
	var q store.QueueStats
	for _, qs := range stats {
		if qs.Queue == defaultQueue {
			q = qs
		}
	}
	require.Equal(t, n, q.Waiting, "pending, due at their deadlines")
	require.Zero(t, q.Due)
	require.Zero(t, q.Running)
	require.Zero(t, q.OldestDueAge)

	d, err := diagnosis.Diagnose(ctx, s, &store.QueueDiagnoseParams{Namespace: store.DefaultNamespace, Queue: defaultQueue, Window: 2 * time.Minute})
	require.NoError(t, err)
	require.Zero(t, d.Depth.Due)
	require.Zero(t, d.Depth.OldestWait)
	require.Empty(t, d.Causes, "causes: %+v", d.Causes)
	require.True(t, d.Healthy, d.Summary)
}

// A signal for one receive (ForWait, a callback link's) is written only
// while the task waits there; before, it is ErrWaitNotReached, after,
// ErrWaitEnded, and neither writes anything.
func testSignalForWait(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	forWait := func(name string, pos int) error {
		_, err := requests.Signal(testContext(t), s, &store.TaskSignalParams{
			Namespace: store.DefaultNamespace, TaskID: id, Name: name, Sender: "link", ForWait: &pos})
		return err
	}
	count := func() int {
		events, err := store.TaskEvents(testContext(t), s, "", id)
		require.NoError(t, err)
		return len(events)
	}
	before := count()
	require.ErrorIs(t, forWait("approval", 0), store.ErrWaitNotReached, "not waiting yet")
	require.Equal(t, before, count(), "nothing written")
	waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	before = count()
	for name, err := range map[string]error{
		"a later receive": forWait("approval", 1),
		"another name":    forWait("other", 0),
	} {
		require.ErrorIs(t, err, store.ErrTaskState, name)
		require.Equal(t, before, count(), name)
	}
	require.NoError(t, forWait("approval", 0))
	require.Equal(t, before+1, count())
	err := forWait("approval", 0)
	require.ErrorIs(t, err, store.ErrWaitEnded, "its receive took a signal already")
	require.ErrorIs(t, err, store.ErrTaskState)
	require.Equal(t, before+1, count())
}

// testSignalAsReplay: a signal is decided from the task's row and the wait
// it is in, not from its whole history; across waits that end by a
// signal, by a timeout, and by a signal of another name first, each
// signal's state agrees with the replay of the history it was appended to
// (the suite's end checks every row against its replay).
func testSignalAsReplay(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	requireAsReplay := func(res store.SignalResult) {
		t.Helper()
		want := stateOf(t, s, id)
		require.Equal(t, want.LastSeq, res.State.LastSeq)
		require.Equal(t, want.Status, res.State.Status)
		require.Equal(t, want.RunAt, res.State.RunAt)
		require.Equal(t, want.Wait, res.State.Wait)
	}
	sig := func(name, dedup string) store.SignalResult {
		t.Helper()
		res, err := signal(t, s, id, name, `{"n":1}`, dedup)
		require.NoError(t, err)
		requireAsReplay(res)
		return res
	}
	sig("early", "e-1") // before any wait: kept for a later receive
	// Receive 0 waits for "a"; a signal of another name leaves the wait,
	// one of its name ends it.
	ct := claimOne(t, s, "w", time.Minute)
	_, err := appendFenced(t, s, ct, history.WaitStartedData{Name: "a", Position: 0, Deadline: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NotNil(t, sig("b", "b-1").State.Wait, "another name leaves the wait")
	require.True(t, sig("b", "b-1").Duplicate, "a seen dedup id")
	require.Nil(t, sig("a", "a-1").State.Wait, "its name ends the wait")
	// Receive 1 waits for "b" until its deadline, which passes: timed out,
	// a later "b" is kept and leaves the task as it is.
	ct = claimWhenDue(t, s, claimParams("w", 1, time.Minute))
	st, err := appendFenced(t, s, ct, history.WaitStartedData{Name: "b", Position: 1, Deadline: time.Now().Add(20 * time.Millisecond)})
	require.NoError(t, err)
	require.NotNil(t, st.Wait)
	ct = claimWhenDue(t, s, claimParams("w", 1, time.Minute))
	_, err = appendFenced(t, s, ct, history.WaitTimedOutData{Name: "b", Position: 1},
		history.WaitStartedData{Name: "c", Position: 2, Deadline: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "c", sig("b", "").State.Wait.Name, "receive 2 still waits for c")
	require.Nil(t, sig("c", "").State.Wait)
	// A running task keeps running and its lease, whatever it is sent.
	ct = claimWhenDue(t, s, claimParams("w", 1, time.Minute))
	res := sig("c", "")
	require.Equal(t, history.StatusRunning, res.State.Status)
	require.Equal(t, ct.State.Lease.Epoch, getTask(t, s, id).LeaseEpoch)
}

// testSignalLookup: the statement a signal is decided on answers what it
// is asked, each fact by itself: whether a dedup id was seen, and the wait
// the task is in after a number of its events.
func testSignalLookup(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	_, err := signal(t, s, id, "early", "", "d-1")
	require.NoError(t, err)
	before := getTask(t, s, id).LastSeq
	waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	after := getTask(t, s, id).LastSeq
	lookup := func(p store.SignalLookupParams) store.SignalFacts {
		t.Helper()
		p.Namespace, p.TaskID = store.DefaultNamespace, id
		facts, err := s.SignalLookup(ctx, &p)
		require.NoError(t, err)
		return facts
	}
	facts := lookup(store.SignalLookupParams{DedupID: "d-1", OpenWait: true, LastSeq: after})
	require.True(t, facts.Seen)
	require.NotNil(t, facts.Wait)
	require.Equal(t, "approval", facts.Wait.Name)
	require.Zero(t, facts.Wait.Position)
	require.Equal(t, store.SignalFacts{}, lookup(store.SignalLookupParams{DedupID: "d-2"}), "an unseen id, and no wait asked for")
	require.Equal(t, store.SignalFacts{}, lookup(store.SignalLookupParams{OpenWait: true, LastSeq: before}), "no wait yet after those events")
	require.True(t, lookup(store.SignalLookupParams{DedupID: "d-1"}).Seen)
	_, err = signal(t, s, id, "approval", "", "")
	require.NoError(t, err)
	require.Nil(t, lookup(store.SignalLookupParams{OpenWait: true, LastSeq: getTask(t, s, id).LastSeq}).Wait, "a signal of its name ends the wait")
}
