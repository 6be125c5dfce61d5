package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// tinyTTL is a lease that has expired by the time anything reads it.
const tinyTTL = time.Millisecond

// waitLeaseExpired waits until task id's lease has expired by the database
// clock.
func waitLeaseExpired(t *testing.T, s *pgstore.Store, id uuid.UUID) {
	t.Helper()
	enginetest.WaitFor(t, "the lease of "+id.String()+" to expire", func() bool {
		var expired bool
		err := s.Pool().QueryRow(context.Background(),
			"SELECT lease_expires_at < now() FROM "+enginetest.TableName(s, "tasks")+" WHERE id = $1", id).Scan(&expired)
		require.NoError(t, err)
		return expired
	})
}

func TestRescueExpired(t *testing.T) {
	t.Parallel()

	t.Run("ReschedulesAndReclaims", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
		first := enginetest.ClaimOne(t, s, "crashed", tinyTTL)
		before := time.Now()
		enginetest.RescueOne(t, s)

		task := enginetest.GetTask(t, s, id)
		require.Equal(t, history.StatusRetrying, task.Status)
		require.Empty(t, task.LeaseOwner)
		require.Nil(t, task.LeaseExpiresAt)
		require.Equal(t, first.Task.LeaseEpoch, task.LeaseEpoch, "the epoch stays until the next claim")
		require.WithinDuration(t, before, task.RunAt, 5*time.Second, "due again at once")
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired},
			enginetest.EventTypes(t, s, id))
		evs := enginetest.Events(t, s, id)
		expired, ok := evs[2].Data.(history.LeaseExpiredData)
		require.True(t, ok)
		require.Equal(t, "crashed", expired.WorkerID)
		require.Equal(t, first.Task.LeaseEpoch, expired.LeaseEpoch)
		require.Equal(t, 1, evs[2].Attempt)

		second := enginetest.ClaimOne(t, s, "rescuer-of-work", time.Minute)
		require.Equal(t, id, second.Task.ID)
		require.Equal(t, 2, second.Task.Attempt)
		require.Greater(t, second.Task.LeaseEpoch, first.Task.LeaseEpoch)

		// The crashed worker comes back: its writes are fenced off.
		_, err := enginetest.AppendFenced(context.Background(), s, first, history.TaskCompletedData{})
		require.Error(t, err)
		enginetest.Complete(t, s, second)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("PastItsDeadlineDeadLetters", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		p := (&enginetest.TaskOpts{MaxAttempts: 5}).Params()
		deadline := time.Now().Add(50 * time.Millisecond)
		p.Scheduled.Deadline = &deadline
		res, err := s.TaskStart(context.Background(), p)
		require.NoError(t, err)
		enginetest.ClaimOne(t, s, "w1", tinyTTL)
		time.Sleep(time.Until(deadline) + 10*time.Millisecond)
		enginetest.RescueOne(t, s)

		task := enginetest.GetTask(t, s, res.ID)
		require.Equal(t, history.StatusDeadLettered, task.Status, "no attempt starts after the deadline")
		evs := enginetest.Events(t, s, res.ID)
		dead, ok := evs[len(evs)-1].Data.(history.TaskDeadLetteredData)
		require.True(t, ok)
		require.Contains(t, dead.Reason, "after the deadline")
		require.Equal(t, "lease_expired", dead.Error.Kind)
		enginetest.RequireProjectionsMatch(t, s)
	})

	t.Run("LastAttemptDeadLetters", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 2})
		enginetest.ClaimOne(t, s, "w1", tinyTTL)
		enginetest.RescueOne(t, s)
		require.Equal(t, history.StatusRetrying, enginetest.GetTask(t, s, id).Status)
		enginetest.ClaimOne(t, s, "w2", tinyTTL)
		enginetest.RescueOne(t, s)

		task := enginetest.GetTask(t, s, id)
		require.Equal(t, history.StatusDeadLettered, task.Status)
		require.NotNil(t, task.FinishedAt)
		require.NotNil(t, task.LastError)
		require.Equal(t, "lease_expired", task.LastError.Kind)
		require.Equal(t, []history.Type{history.TaskScheduled,
			history.AttemptStarted, history.LeaseExpired,
			history.AttemptStarted, history.LeaseExpired, history.TaskDeadLettered,
		}, enginetest.EventTypes(t, s, id))
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w3", 10, time.Minute)), "a dead-lettered task is not claimed")
		n, err := maintenance.RescueExpired(context.Background(), s, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("ReleasedAttemptsDoNotCount", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 2})
		// A graceful shutdown hands attempt 1 back: it used none of the
		// task's budget.
		first := enginetest.ClaimOne(t, s, "w1", time.Hour)
		_, err := enginetest.AppendFenced(ctx, s, first, history.TaskReleasedData{WorkerID: "w1", LeaseEpoch: first.State.Lease.Epoch})
		require.NoError(t, err)
		enginetest.ClaimOne(t, s, "w2", tinyTTL)
		enginetest.RescueOne(t, s)
		require.Equal(t, history.StatusRetrying, enginetest.GetTask(t, s, id).Status, "one of two attempts used")
		enginetest.ClaimOne(t, s, "w3", tinyTTL)
		enginetest.RescueOne(t, s)
		require.Equal(t, history.StatusDeadLettered, enginetest.GetTask(t, s, id).Status, "two of two attempts used")
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("SingleAttemptDeadLettersAtOnce", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 1})
		enginetest.ClaimOne(t, s, "w1", tinyTTL)
		enginetest.RescueOne(t, s)
		require.Equal(t, history.StatusDeadLettered, enginetest.GetTask(t, s, id).Status)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("NoBudgetIsTheDefaultBudget", func(t *testing.T) {
		t.Parallel()
		// max_attempts 0 (a child started before children recorded their
		// type's budget) is the default budget, never unlimited.
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 0})
		for attempt := 1; attempt <= history.DefaultMaxAttempts; attempt++ {
			ct := enginetest.ClaimOne(t, s, fmt.Sprintf("w%d", attempt), tinyTTL)
			require.Equal(t, attempt, ct.Task.Attempt)
			enginetest.RescueOne(t, s)
			if attempt < history.DefaultMaxAttempts {
				require.Equal(t, history.StatusRetrying, enginetest.GetTask(t, s, id).Status, "attempt %d", attempt)
			}
		}
		task := enginetest.GetTask(t, s, id)
		require.Equal(t, history.StatusDeadLettered, task.Status, "dead-lettered at the default budget")
		evs := enginetest.Events(t, s, id)
		dead, ok := evs[len(evs)-1].Data.(history.TaskDeadLetteredData)
		require.True(t, ok)
		require.Equal(t, fmt.Sprintf("lease expired on attempt %d of %d", history.DefaultMaxAttempts, history.DefaultMaxAttempts), dead.Reason)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("HeartbeatProtectsLease", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
		ct := enginetest.ClaimOne(t, s, "slow", tinyTTL)
		waitLeaseExpired(t, s, id)
		// The worker's heartbeat arrives before the rescuer looks.
		held, err := s.LeaseExtendMany(ctx, []store.LeaseRef{{TaskID: id, Epoch: ct.State.Lease.Epoch}}, time.Hour)
		require.NoError(t, err)
		require.Contains(t, held, id)
		n, err := maintenance.RescueExpired(ctx, s, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		task := enginetest.GetTask(t, s, id)
		require.Equal(t, history.StatusRunning, task.Status)
		require.Equal(t, "slow", task.LeaseOwner)
		enginetest.Complete(t, s, ct)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("LiveLeasesAndOtherStatesUntouched", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		enginetest.StartTasks(t, s, 3, nil)
		live := enginetest.ClaimOne(t, s, "w", time.Hour)
		done := enginetest.ClaimOne(t, s, "w", tinyTTL)
		enginetest.Complete(t, s, done)
		n, err := maintenance.RescueExpired(ctx, s, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, history.StatusRunning, enginetest.GetTask(t, s, live.Task.ID).Status)
		require.Equal(t, history.StatusCompleted, enginetest.GetTask(t, s, done.Task.ID).Status)
		require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("RespectsMax", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		ids := enginetest.StartTasks(t, s, 5, nil)
		require.Len(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 5, tinyTTL)), 5)
		for _, id := range ids {
			waitLeaseExpired(t, s, id)
		}
		n, err := maintenance.RescueExpired(ctx, s, 2)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = maintenance.RescueExpired(ctx, s, 100)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, 5, enginetest.RequireProjectionsMatch(t, s))
	})
}

func TestRescueExpiredConcurrentRescuers(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	const tasks = 30
	ids := enginetest.StartTasks(t, s, tasks, &enginetest.TaskOpts{MaxAttempts: 3})
	require.Len(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", tasks, tinyTTL)), tasks)
	for _, id := range ids {
		waitLeaseExpired(t, s, id)
	}
	const rescuers = 3
	var (
		counts = make([]int, rescuers)
		errs   = make([]error, rescuers)
		start  = make(chan struct{})
		done   = make(chan struct{}, rescuers)
	)
	for i := range rescuers {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			counts[i], errs[i] = maintenance.RescueExpired(context.Background(), s, 100)
		}()
	}
	close(start)
	for range rescuers {
		<-done
	}
	total := 0
	for i := range rescuers {
		require.NoError(t, errs[i])
		total += counts[i]
	}
	require.Equal(t, tasks, total, "each expired lease rescued once in all")
	for _, id := range ids {
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired},
			enginetest.EventTypes(t, s, id))
	}
	require.Equal(t, tasks, enginetest.RequireProjectionsMatch(t, s))
}

func TestLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	attempt := func(name, owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := s.LeaderAttempt(ctx, name, owner, ttl)
		require.NoError(t, err)
		return ok
	}

	require.True(t, attempt("rescuer", "a", time.Hour))
	require.False(t, attempt("rescuer", "b", time.Hour), "one owner at a time")
	require.True(t, attempt("rescuer", "a", time.Hour), "the owner renews")
	require.True(t, attempt("cron", "b", time.Hour), "roles are independent")

	t.Log("resign hands over at once; resigning a lease one does not hold does nothing")
	require.NoError(t, s.LeaderResign(ctx, "rescuer", "b"))
	require.False(t, attempt("rescuer", "b", time.Hour))
	require.NoError(t, s.LeaderResign(ctx, "rescuer", "a"))
	require.True(t, attempt("rescuer", "b", time.Hour))
	require.False(t, attempt("rescuer", "a", time.Hour))

	t.Log("an expired lease passes to the next taker")
	require.True(t, attempt("retention", "a", tinyTTL))
	enginetest.WaitFor(t, "b to take over the expired lease", func() bool { return attempt("retention", "b", time.Hour) })
	require.False(t, attempt("retention", "a", time.Hour))

	t.Log("a renewal extends the lease: it does not expire at the first term's end")
	require.True(t, attempt("timers", "a", tinyTTL))
	require.True(t, attempt("timers", "a", time.Hour)) // may run after the tiny term ran out: then it re-takes it
	require.False(t, attempt("timers", "b", time.Hour))
}

func TestLeaderConcurrentAttempts(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	const n = 20
	results := make(chan bool, n)
	errs := make(chan error, n)
	start := make(chan struct{})
	done := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			ok, err := s.LeaderAttempt(context.Background(), "rescuer", fmt.Sprintf("owner-%d", i), time.Hour)
			results <- ok
			errs <- err
			done <- struct{}{}
		}()
	}
	close(start)
	for range n {
		<-done
	}
	leaders := 0
	for range n {
		require.NoError(t, <-errs)
		if <-results {
			leaders++
		}
	}
	require.Equal(t, 1, leaders)
}

func TestRescuerService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	_, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s})
	require.Error(t, err, "Owner is required")

	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "crashed", tinyTTL)

	r1, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: "r1", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	r2, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: "r2", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r1.Start(ctx))
	t.Cleanup(r1.Stop)
	require.NoError(t, r2.Start(ctx))
	t.Cleanup(r2.Stop)
	require.Error(t, r1.Start(ctx), "a second Start is refused")

	enginetest.WaitStatus(t, s, id, history.StatusRetrying)
	require.Equal(t, 3, len(enginetest.EventTypes(t, s, id)), "rescued once")
	resumed := enginetest.ClaimOne(t, s, "w", time.Minute)
	require.Equal(t, id, resumed.Task.ID)
	enginetest.Complete(t, s, resumed)

	// Stopping the leader resigns, so the other takes over without
	// waiting for the lease to run out (3 intervals).
	var leader string
	err = s.Pool().QueryRow(ctx, "SELECT owner FROM "+enginetest.TableName(s, "leaders")+" WHERE name = 'rescuer'").Scan(&leader)
	require.NoError(t, err)
	require.Contains(t, []string{"r1", "r2"}, leader)
	stopped, other := r1, "r2"
	if leader == "r2" {
		stopped, other = r2, "r1"
	}
	stopped.Stop()
	stopped.Stop() // idempotent

	// The other rescuer keeps rescuing.
	id2 := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	ct := enginetest.ClaimOne(t, s, "crashed-again", tinyTTL)
	require.Equal(t, id2, ct.Task.ID)
	enginetest.WaitStatus(t, s, id2, history.StatusRetrying)
	enginetest.WaitFor(t, other+" to lead", func() bool {
		var owner string
		err := s.Pool().QueryRow(ctx, "SELECT owner FROM "+enginetest.TableName(s, "leaders")+" WHERE name = 'rescuer'").Scan(&owner)
		require.NoError(t, err)
		return owner == other
	})
	r1.Stop()
	r2.Stop()
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}

func TestRescuerStopBeforeStart(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	r, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: "r"})
	require.NoError(t, err)
	r.Stop() // safe before Start
	r.Stop()
}

// TestRescuerResignsOnShutdown checks that a leading rescuer gives its lease
// up when it stops or its context ends, wherever in its loop that finds it,
// so another process takes over at once. Several rounds, since where the
// loop is when it is stopped is up to the scheduler.
func TestRescuerResignsOnShutdown(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	leaders := func() int {
		var n int
		err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+enginetest.TableName(s, "leaders")).Scan(&n)
		require.NoError(t, err)
		return n
	}
	for round := range 6 {
		owner := fmt.Sprintf("r%d", round)
		r, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: owner, Interval: time.Millisecond, Logger: enginetest.Logger(t)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, r.Start(ctx))
		enginetest.WaitFor(t, owner+" to lead", func() bool {
			var n int
			err := s.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+enginetest.TableName(s, "leaders")+" WHERE owner = $1", owner).Scan(&n)
			require.NoError(t, err)
			return n == 1
		})
		if round%2 == 0 {
			cancel() // the process is shutting down
		}
		r.Stop() // waits for the loop, which resigns on the way out
		cancel()
		require.Zero(t, leaders(), "round %d (%s): the stopped leader still holds the lease", round, map[bool]string{true: "context cancelled", false: "Stop"}[round%2 == 0])
	}
}

// TestRescuerRescuesWithoutLeadership: a worker that also led dies holding
// a task. Its leader lease still runs (an hour here), and the rescuer left
// passes only once an hour, yet the task is rescued once its lease has
// expired: the rescue needs no leadership, and it is timed to the lease's
// expiry, not to the next pass.
func TestRescuerRescuesWithoutLeadership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	led, err := s.LeaderAttempt(ctx, "rescuer", "dead", time.Hour)
	require.NoError(t, err)
	require.True(t, led)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "dead", 300*time.Millisecond)

	r, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: "survivor", Interval: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)

	enginetest.WaitStatus(t, s, id, history.StatusRetrying)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired},
		enginetest.EventTypes(t, s, id), "rescued once")
	var leader string
	require.NoError(t, s.Pool().QueryRow(ctx, "SELECT owner FROM "+enginetest.TableName(s, "leaders")+" WHERE name = 'rescuer'").Scan(&leader))
	require.Equal(t, "dead", leader, "the dead leader's lease still runs: the rescue did not wait for it")
	r.Stop()
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

// TestRescuerWakesAtLeaseExpiry: the leader's rescuer, passing once an
// hour, rescues leases as they expire, each found by reading the next
// expiry again after a rescue: a lease that expires later than the first
// one is rescued at its own expiry too.
func TestRescuerWakesAtLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	first := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "crashed", 500*time.Millisecond)
	second := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "crashed", time.Second)

	r, err := maintenance.NewRescuer(maintenance.RescuerConfig{Store: s, Owner: "r", Interval: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)

	enginetest.WaitStatus(t, s, first, history.StatusRetrying)
	enginetest.WaitStatus(t, s, second, history.StatusRetrying)
	r.Stop()
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}
