package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// The embedded store keeps leases and start deadlines by the clock it is
// given: moving that clock past a crashed worker's lease lets the rescuer
// take the task back, and past a start deadline ends the task, with no
// test waiting out either.
func TestStoreKeepsTimeByItsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := enginetest.NewClock()
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "cairn.db"), Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	leased, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default",
		Scheduled: history.TaskScheduledData{TaskType: "a", TypeVersion: 1, Queue: "q"}})
	require.NoError(t, err)
	deadline := clock.Now().Add(time.Hour)
	late, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default",
		Scheduled: history.TaskScheduledData{TaskType: "b", TypeVersion: 1, Queue: "q", StartDeadline: &deadline}})
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"q"},
		Types: []store.TypeKey{{Type: "a", Version: 1}}, Owner: "crashed", Max: 1, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	expired, err := s.TaskListLeaseExpired(ctx, &store.LeaseExpiryParams{Max: 10})
	require.NoError(t, err)
	require.Empty(t, expired, "the lease runs for a minute of the store's clock")
	n, err := maintenance.ExpireStartDeadlines(ctx, s, 10)
	require.NoError(t, err)
	require.Zero(t, n, "the start deadline is an hour away")

	clock.Advance(2 * time.Hour)
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "r", Interval: 10 * time.Millisecond, Clock: clock})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	require.Eventually(t, func() bool {
		a, errA := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "default", ID: leased.ID})
		b, errB := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "default", ID: late.ID})
		require.NoError(t, errA)
		require.NoError(t, errB)
		return a.Status == history.StatusRetrying && b.Status == history.StatusExpired
	}, 15*time.Second, 10*time.Millisecond, "the rescuer takes the lease back and ends the task past its start deadline")

	events, err := store.TaskEvents(ctx, s, "", leased.ID)
	require.NoError(t, err)
	last := events[len(events)-1]
	require.Equal(t, history.LeaseExpired, last.Type())
	require.WithinDuration(t, clock.Now(), last.At, time.Millisecond, "the rescue is recorded at the clock's time")
}
