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
		held, err := s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: id, Epoch: ct.State.Lease.Epoch}}, TTL: time.Hour})
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
