package storetest

import (
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// leaseTests: leases expire, are rescued, and are extended by heartbeats.
var leaseTests = []conformanceTest{
	{"ExpiredLeaseIsRescuedAndReclaimed", testExpiredLeaseRescued},
	{"ExpiredLeaseOnLastAttemptDeadLetters", testExpiredLeaseLastAttemptDeadLetters},
	{"LiveLeaseIsNotRescued", testLiveLeaseNotRescued},
	{"LeaseExtendManyExtendsHeldLeasesOnly", testLeaseExtendMany},
	{"LeaseExpiryByHowLongExpired", testLeaseExpiryByHowLongExpired},
}

// shortTTL is a lease that expires while the test waits for it.
const shortTTL = 50 * time.Millisecond

func testExpiredLeaseRescued(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	first := claimOne(t, s, "crashed", shortTTL)
	time.Sleep(shortTTL)
	rescueOne(t, s)

	task := getTask(t, s, id)
	require.Equal(t, history.StatusRetrying, task.Status, "claimable again")
	require.Empty(t, task.LeaseOwner)
	require.Nil(t, task.LeaseExpiresAt)
	require.Equal(t, first.Task.LeaseEpoch, task.LeaseEpoch, "the epoch stays until the next claim")
	require.WithinDuration(t, time.Now(), task.RunAt, 10*time.Second, "due again at once")
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired}, eventTypes(t, s, id))
	evs := events(t, s, id)
	expired, ok := evs[2].Data.(history.LeaseExpiredData)
	require.True(t, ok)
	require.Equal(t, "crashed", expired.WorkerID)
	require.Equal(t, first.Task.LeaseEpoch, expired.LeaseEpoch)
	require.Equal(t, 1, evs[2].Attempt)

	// The lost lease is not extended.
	held, err := s.LeaseExtendMany(testContext(t), &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: id, Epoch: first.Task.LeaseEpoch}}, TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, held, "a rescued lease is lost")

	second := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, id, second.Task.ID)
	require.Equal(t, 2, second.Task.Attempt)
	require.Greater(t, second.Task.LeaseEpoch, first.Task.LeaseEpoch)

	// The crashed worker comes back: its writes are fenced off.
	_, err = appendFenced(t, s, first, history.TaskCompletedData{})
	requireIs(t, err, store.ErrFenced)
	n, err := maintenance.RescueExpired(testContext(t), s, 100)
	require.NoError(t, err)
	require.Zero(t, n, "the new lease is live")
	complete(t, s, second)
	require.Equal(t, 1, requireReplayMatches(t, s))
}

func testExpiredLeaseLastAttemptDeadLetters(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 1})
	claimOne(t, s, "w1", shortTTL)
	time.Sleep(shortTTL)
	rescueOne(t, s)
	task := getTask(t, s, id)
	require.Equal(t, history.StatusDeadLettered, task.Status, "its only attempt is used up")
	require.NotNil(t, task.LastError)
	require.NotNil(t, task.FinishedAt)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired, history.TaskDeadLettered},
		eventTypes(t, s, id))
	require.Empty(t, claim(t, s, claimParams("w2", 10, time.Minute)), "a dead-lettered task is not claimed")
}

func testLiveLeaseNotRescued(t *testing.T, s store.Store) {
	live := start(t, s, spec{})
	claimOne(t, s, "w", time.Hour)
	start(t, s, spec{}) // pending
	n, err := maintenance.RescueExpired(testContext(t), s, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, history.StatusRunning, getTask(t, s, live).Status)
	require.Equal(t, int64(2), getTask(t, s, live).LastSeq)
}

func testLeaseExtendMany(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for range 3 {
		start(t, s, spec{})
	}
	a := claimOne(t, s, "w", time.Minute)
	b := claimOne(t, s, "w", time.Minute)
	c := claimOne(t, s, "w", time.Minute)
	complete(t, s, c)

	held, err := s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{
		{TaskID: a.Task.ID, Epoch: a.State.Lease.Epoch},
		{TaskID: b.Task.ID, Epoch: b.State.Lease.Epoch + 1}, // not the task's epoch
		{TaskID: c.Task.ID, Epoch: c.State.Lease.Epoch},     // finished
		{TaskID: uuid.New(), Epoch: 1},                      // no such task
	}, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{a.Task.ID: {}}, held, "only the held lease is extended")

	aNow, bNow, cNow := getTask(t, s, a.Task.ID), getTask(t, s, b.Task.ID), getTask(t, s, c.Task.ID)
	require.True(t, aNow.LeaseExpiresAt.After(a.Task.LeaseExpiresAt.Add(30*time.Minute)),
		"extended to an hour from now: %s, claimed with %s", aNow.LeaseExpiresAt, a.Task.LeaseExpiresAt)
	require.True(t, bNow.LeaseExpiresAt.Equal(*b.Task.LeaseExpiresAt), "a stale epoch must not extend the lease")
	require.Nil(t, cNow.LeaseExpiresAt)
	require.Equal(t, a.Task.LastSeq, aNow.LastSeq, "a heartbeat appends no event")

	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, held)

	// An extended lease outlives its first term: a short lease extended is
	// not rescued.
	d := start(t, s, spec{})
	cd := claimOne(t, s, "w", 300*time.Millisecond)
	require.Equal(t, d, cd.Task.ID)
	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: d, Epoch: cd.State.Lease.Epoch}}, TTL: time.Hour})
	require.NoError(t, err)
	require.Contains(t, held, d)
	time.Sleep(time.Until(*cd.Task.LeaseExpiresAt) + 100*time.Millisecond) // past the first term
	n, err := maintenance.RescueExpired(ctx, s, 100)
	require.NoError(t, err)
	require.Zero(t, n, "the heartbeat kept the lease")
	require.Equal(t, history.StatusRunning, getTask(t, s, d).Status)
}

// testLeaseExpiryByHowLongExpired: the rescue's reads count a lease as
// expired once it has been for ExpiredFor, and say how long until the next
// one will have been, by the store's clock.
func testLeaseExpiryByHowLongExpired(t *testing.T, s store.Store) {
	ctx := testContext(t)
	next := func(expiredFor time.Duration) (time.Duration, bool) {
		t.Helper()
		in, ok, err := s.TaskLeaseNextExpiry(ctx, &store.LeaseExpiryParams{ExpiredFor: expiredFor})
		require.NoError(t, err)
		return in, ok
	}
	list := func(expiredFor time.Duration) []uuid.UUID {
		t.Helper()
		ids, err := s.TaskListLeaseExpired(ctx, &store.LeaseExpiryParams{Max: 10, ExpiredFor: expiredFor})
		require.NoError(t, err)
		return ids
	}
	start(t, s, spec{})
	_, ok := next(0)
	require.False(t, ok, "no task is running")

	long := claimOne(t, s, "w", 2*time.Hour)
	start(t, s, spec{})
	short := claimOne(t, s, "w", shortTTL)
	time.Sleep(shortTTL + 10*time.Millisecond)

	require.Equal(t, []uuid.UUID{short.Task.ID}, list(0))
	require.Empty(t, list(time.Hour), "expired, but not for an hour")
	in, ok := next(0)
	require.True(t, ok)
	require.InDelta(t, (2 * time.Hour).Seconds(), in.Seconds(), 60, "the long lease is next; the expired one is listed, not waited for")
	in, ok = next(time.Hour)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), in.Seconds(), 60, "the short lease will have been expired for an hour in an hour")

	complete(t, s, long)
	in, ok = next(0)
	require.False(t, ok, "the one running task left is expired: nothing to wait for (%s)", in)
}
