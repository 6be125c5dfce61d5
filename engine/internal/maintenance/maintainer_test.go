package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

func TestRescuerService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	_, err := maintenance.New(maintenance.Config{Store: s})
	require.Error(t, err, "Owner is required")

	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "crashed", tinyTTL)

	r1, err := maintenance.New(maintenance.Config{Store: s, Owner: "r1", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	r2, err := maintenance.New(maintenance.Config{Store: s, Owner: "r2", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
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
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "r"})
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
		r, err := maintenance.New(maintenance.Config{Store: s, Owner: owner, Interval: time.Millisecond, Logger: enginetest.Logger(t)})
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
	led, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: "rescuer", Owner: "dead", TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, led)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	enginetest.ClaimOne(t, s, "dead", 300*time.Millisecond)

	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "survivor", Interval: time.Hour, Logger: enginetest.Logger(t)})
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

	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "r", Interval: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)

	enginetest.WaitStatus(t, s, first, history.StatusRetrying)
	enginetest.WaitStatus(t, s, second, history.StatusRetrying)
	r.Stop()
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}
