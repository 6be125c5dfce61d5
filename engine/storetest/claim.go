package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// claimTests: which tasks a claim takes, and what it records.
var claimTests = []conformanceTest{
	{"ClaimStartsAnAttemptUnderALease", testClaimStartsAttempt},
	{"ClaimTakesDueTasksOnly", testClaimTakesDueTasksOnly},
	{"ClaimTakesOnlyItsQueuesTypesAndNamespace", testClaimOnlyMatching},
	{"ClaimTakesHigherPriorityFirst", testClaimHigherPriorityFirst},
	{"ClaimRespectsMax", testClaimRespectsMax},
	{"ClaimSkipsTasksWhileTheirLeaseIsHeld", testClaimSkipsHeldLeases},
	{"ReclaimGetsAGreaterEpoch", testReclaimGetsGreaterEpoch},
	{"ClaimServesFairnessKeysRoundRobin", testClaimFairnessKeys},
	{"ClaimTakesDueTasksAmongTasksNotYetDue", testClaimDueAmongNotYetDue},
	{"ClaimLeavesExcludedTasks", testClaimExclude},
}

// testClaimExclude: a claim never takes an excluded task, in its walk by
// priority or its aging slots, and does not report it as due work left
// (a worker would claim again at once, forever); a list over
// MaxClaimExclude is refused.
func testClaimExclude(t *testing.T, s store.Store) {
	old := start(t, s, spec{RunAt: time.Now().Add(-time.Hour)}) // the aging slot's pick
	urgent := start(t, s, spec{Priority: 9})
	other := start(t, s, spec{})
	p := claimParams("w", 10, time.Minute)
	p.Exclude = []uuid.UUID{old, urgent, uuid.New()}
	res, err := s.TaskClaim(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]bool{other: true}, claimedIDs(res.Tasks))
	res, err = s.TaskClaim(context.Background(), p)
	require.NoError(t, err)
	require.Empty(t, res.Tasks)
	require.False(t, res.HeldBack, "excluded tasks are not due work left")
	require.True(t, res.NextAt.IsZero(), "nor work to come: %v", res.NextAt)
	require.Equal(t, history.StatusPending, getTask(t, s, old).Status)

	p.Exclude = make([]uuid.UUID, store.MaxClaimExclude+1)
	_, err = s.TaskClaim(context.Background(), p)
	require.ErrorContains(t, err, "more than the 10000 a claim takes")
	p.Exclude = []uuid.UUID{}
	require.Equal(t, map[uuid.UUID]bool{old: true, urgent: true}, claimedIDs(claim(t, s, p)), "an empty list excludes none")
	require.Equal(t, 3, requireReplayMatches(t, s))
}

// testClaimFairnessKeys: key a floods the queue, then key b sends two
// tasks; claims take turns between the keys instead of draining a's
// backlog first.
func testClaimFairnessKeys(t *testing.T, s store.Store) {
	var a []uuid.UUID
	for range 30 {
		a = append(a, start(t, s, spec{FairnessKey: "a"}))
	}
	b1 := start(t, s, spec{FairnessKey: "b"})
	b2 := start(t, s, spec{FairnessKey: "b"})
	// No aging slot: it takes the oldest due task, one of a's, on one
	// claim in eight, and three such claims in a row (1 in 512) would push
	// b1 past the first four.
	p := claimParams("w", 1, time.Minute)
	p.StrictPriority = true
	var order []uuid.UUID
	for range 6 {
		claimed := claim(t, s, p)
		require.Len(t, claimed, 1)
		order = append(order, claimed[0].Task.ID)
	}
	require.Contains(t, order[:4], b1, "b's first task starts within the first turns, not after a's 30")
	require.Contains(t, order, b2, "b's second task too")
	require.Equal(t, a[0], order[0], "a's first task, placed first, starts first")
}

func testClaimStartsAttempt(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	before := getTask(t, s, id)
	ct := claimOne(t, s, "worker-7", time.Minute)

	task := ct.Task
	require.Equal(t, id, task.ID)
	require.Equal(t, history.StatusRunning, task.Status)
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, "worker-7", task.LeaseOwner)
	require.Positive(t, task.LeaseEpoch)
	require.Greater(t, task.LeaseEpoch, before.LeaseEpoch)
	require.Equal(t, int64(2), task.LastSeq)
	require.NotNil(t, task.LeaseExpiresAt)
	require.NotNil(t, task.StartedAt)
	require.WithinDuration(t, task.StartedAt.Add(time.Minute), *task.LeaseExpiresAt, time.Second,
		"the lease expires LeaseTTL after the claim")

	// The claim's history and state.
	require.Len(t, ct.Events, 2)
	require.Equal(t, history.TaskScheduled, ct.Events[0].Type())
	require.Equal(t, history.StatusRunning, ct.State.Status)
	require.Equal(t, 1, ct.State.Attempt)
	require.Equal(t, task.LeaseEpoch, ct.State.Lease.Epoch)
	require.Equal(t, "worker-7", ct.State.Lease.Owner)
	require.Equal(t, int64(2), ct.State.LastSeq)
	requireRowMatchesState(t, task, ct.State)

	// The stored history ends in attempt_started.
	evs := events(t, s, id)
	require.Len(t, evs, 2)
	last := evs[1]
	require.Equal(t, int64(2), last.Seq)
	require.Equal(t, 1, last.Attempt)
	started, ok := last.Data.(history.AttemptStartedData)
	require.True(t, ok, "the last event is %T, want attempt_started", last.Data)
	require.Equal(t, "worker-7", started.WorkerID)
	require.Equal(t, task.LeaseEpoch, started.LeaseEpoch)
	require.WithinDuration(t, *task.LeaseExpiresAt, started.LeaseExpiresAt, time.Microsecond)
	require.Equal(t, history.AttemptStarted, ct.Events[1].Type(), "the claim returns the attempt_started it appended")

	row := getTask(t, s, id)
	require.Equal(t, history.StatusRunning, row.Status)
	require.Equal(t, task.LeaseEpoch, row.LeaseEpoch)
	require.Equal(t, *row, *task, "the claim returns the row as written")
	require.Equal(t, 1, requireReplayMatches(t, s))
}

func testClaimTakesDueTasksOnly(t *testing.T, s store.Store) {
	later := start(t, s, spec{RunAt: time.Now().Add(time.Hour)})
	now := start(t, s, spec{})
	past := start(t, s, spec{RunAt: time.Now().Add(-time.Hour)})
	claimed := claim(t, s, claimParams("w", 10, time.Minute))
	require.Equal(t, map[uuid.UUID]bool{now: true, past: true}, claimedIDs(claimed))
	require.Equal(t, history.StatusPending, getTask(t, s, later).Status, "a task not yet due stays pending")
	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)))
}

// testClaimDueAmongNotYetDue: a claim takes no more than are due (it counts
// them first, so its walk stops at the last), yet in priority order, not
// the oldest due first; tasks not yet due of a higher priority, or keyed
// among due ones of their key, stay where they are.
func testClaimDueAmongNotYetDue(t *testing.T, s store.Store) {
	later := time.Now().Add(time.Hour)
	for range 3 {
		start(t, s, spec{Priority: 9, RunAt: later})
		start(t, s, spec{FairnessKey: "k", RunAt: later})
	}
	old := []uuid.UUID{start(t, s, spec{RunAt: time.Now().Add(-time.Hour)}), start(t, s, spec{RunAt: time.Now().Add(-time.Hour)})}
	keyed := start(t, s, spec{FairnessKey: "k"})
	urgent := []uuid.UUID{start(t, s, spec{Priority: 5}), start(t, s, spec{Priority: 5})}

	p := claimParams("w", 2, time.Minute)
	p.StrictPriority = true
	require.Equal(t, map[uuid.UUID]bool{urgent[0]: true, urgent[1]: true}, claimedIDs(claim(t, s, p)),
		"two of five due: the higher priority, though the oldest due are others")
	p.Max = 10
	require.Equal(t, map[uuid.UUID]bool{old[0]: true, old[1]: true, keyed: true}, claimedIDs(claim(t, s, p)),
		"the rest of the due tasks, and no task not yet due")
	require.Empty(t, claim(t, s, p))
}

func testClaimOnlyMatching(t *testing.T, s store.Store) {
	want := start(t, s, spec{Queue: "q1", Type: "doc", Version: 1})
	start(t, s, spec{Queue: "q2", Type: "doc", Version: 1})
	v2 := start(t, s, spec{Queue: "q1", Type: "doc", Version: 2})
	start(t, s, spec{Queue: "q1", Type: "mail", Version: 1})
	start(t, s, spec{Queue: "q1", Type: "doc", Version: 1, Namespace: "other"})
	// "doc" at version 1 must not match a type named "do" at version 11.
	start(t, s, spec{Queue: "q1", Type: "do", Version: 11})

	p := &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"q1"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 10, LeaseTTL: time.Minute}
	claimed := claim(t, s, p)
	require.Len(t, claimed, 1)
	require.Equal(t, want, claimed[0].Task.ID)
	require.Empty(t, claim(t, s, p))

	require.Equal(t, history.StatusPending, getTask(t, s, v2).Status, "a v2 task is left to v2 workers")
	p.Types = []store.TypeKey{{Type: "doc", Version: 2}}
	claimed = claim(t, s, p)
	require.Len(t, claimed, 1)
	require.Equal(t, v2, claimed[0].Task.ID)

	p.Types, p.Queues = nil, []string{"q1", "q2"}
	require.Empty(t, claim(t, s, p), "no types, no claims")
	p.Types, p.Queues = []store.TypeKey{{Type: "doc", Version: 1}}, nil
	require.Empty(t, claim(t, s, p), "no queues, no claims")
	require.Equal(t, 6, requireReplayMatches(t, s))
}

func testClaimHigherPriorityFirst(t *testing.T, s store.Store) {
	base := time.Now().Add(-time.Hour)
	low := start(t, s, spec{Priority: 1, RunAt: base})
	highLate := start(t, s, spec{Priority: 5, RunAt: base.Add(2 * time.Minute)})
	mid := start(t, s, spec{Priority: 3, RunAt: base})
	highEarly := start(t, s, spec{Priority: 5, RunAt: base.Add(time.Minute)})
	negative := start(t, s, spec{Priority: -2, RunAt: base.Add(-time.Hour)})
	p := claimParams("w", 1, time.Minute)
	p.StrictPriority = true // no aging slot: the order is the priority order alone
	var order []uuid.UUID
	for range 5 {
		claimed := claim(t, s, p)
		require.Len(t, claimed, 1)
		order = append(order, claimed[0].Task.ID)
	}
	require.Equal(t, []uuid.UUID{highEarly, highLate, mid, low, negative}, order,
		"by priority, then run time")

	// A batch takes the best tasks too.
	var batch []uuid.UUID
	for i := range 6 {
		batch = append(batch, start(t, s, spec{Priority: 10 + i}))
	}
	p.Max = 3
	require.Equal(t, map[uuid.UUID]bool{batch[5]: true, batch[4]: true, batch[3]: true}, claimedIDs(claim(t, s, p)))
}

func testClaimRespectsMax(t *testing.T, s store.Store) {
	for range 5 {
		start(t, s, spec{})
	}
	require.Empty(t, claim(t, s, claimParams("w", 0, time.Minute)), "max 0 claims nothing")
	require.Len(t, claim(t, s, claimParams("w", 3, time.Minute)), 3)
	require.Len(t, claim(t, s, claimParams("w", 3, time.Minute)), 2)
	require.Empty(t, claim(t, s, claimParams("w", 3, time.Minute)))
	require.Equal(t, 5, requireReplayMatches(t, s))
}

func testClaimSkipsHeldLeases(t *testing.T, s store.Store) {
	a := start(t, s, spec{})
	b := start(t, s, spec{})
	first := claimOne(t, s, "w1", time.Minute)
	second := claimOne(t, s, "w2", time.Minute)
	require.Equal(t, map[uuid.UUID]bool{a: true, b: true}, claimedIDs([]*store.ClaimedTask{first, second}),
		"the second claim takes the other task")
	require.Empty(t, claim(t, s, claimParams("w3", 10, time.Minute)), "a held lease is not claimed again")

	complete(t, s, second)
	require.Empty(t, claim(t, s, claimParams("w3", 10, time.Minute)), "nor is a finished task")
	running := getTask(t, s, first.Task.ID)
	require.Equal(t, history.StatusRunning, running.Status)
	require.Equal(t, "w1", running.LeaseOwner)
}

func testReclaimGetsGreaterEpoch(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	first := claimOne(t, s, "w1", time.Minute)
	// A stopping worker hands the task back: due again at once.
	_, err := appendFenced(t, s, first, history.TaskReleasedData{WorkerID: "w1", LeaseEpoch: first.State.Lease.Epoch})
	require.NoError(t, err)
	released := getTask(t, s, id)
	require.Equal(t, history.StatusPending, released.Status)
	require.Empty(t, released.LeaseOwner)
	require.Nil(t, released.LeaseExpiresAt)

	again := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, id, again.Task.ID)
	require.Equal(t, 2, again.Task.Attempt)
	require.Greater(t, again.Task.LeaseEpoch, first.Task.LeaseEpoch, "each claim a greater epoch")
	require.Equal(t, "w2", again.Task.LeaseOwner)
	require.True(t, again.Task.StartedAt.Equal(*first.Task.StartedAt), "started at keeps the first attempt's time")
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased, history.AttemptStarted},
		eventTypes(t, s, id))

	_, err = appendFenced(t, s, first, history.TaskCompletedData{})
	requireIs(t, err, store.ErrFenced, "the first attempt's writes are fenced off")
	complete(t, s, again)
}
