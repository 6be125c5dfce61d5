package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
)

// RunBrokenSchedule checks, on a store whose schedule row break can spoil
// behind the store's back (its task type emptied, so no start of it can
// be planned), that a schedule whose start fails for a reason of its own is
// recorded as skipped (start_failed, with the error) and waits for its
// retry time, while the other schedules fire: one broken schedule neither
// spins the leader nor holds the due list.
func RunBrokenSchedule(t *testing.T, s store.Store, spoil func(t *testing.T, namespace, name string)) {
	ctx := testContext(t)
	broken := schedule(store.DefaultNamespace, "broken")
	broken.Cron = "@every 1s"
	healthy := schedule(store.DefaultNamespace, "healthy")
	healthy.Cron = "@every 1s"
	require.NoError(t, s.ScheduleCreate(ctx, broken))
	require.NoError(t, s.ScheduleCreate(ctx, healthy))
	spoil(t, store.DefaultNamespace, "broken")

	var failed, fired *store.ScheduleFiring
	waitFor(t, "both schedules' first ticks", func() bool {
		firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
		require.NoError(t, err, "a schedule's failed start is a skip, not an error of the firing")
		for i, f := range firings {
			switch {
			case f.Name == "broken" && failed == nil:
				failed = &firings[i]
			case f.Name == "healthy" && fired == nil:
				fired = &firings[i]
			}
		}
		return failed != nil && fired != nil
	})
	require.Equal(t, store.ScheduleSkipStartFailed, failed.SkipReason)
	require.Error(t, failed.StartErr)
	require.False(t, failed.Started)
	require.True(t, failed.RetryAt.After(failed.Tick), "tried again later, not at once")
	require.True(t, fired.Started, "the broken schedule does not stop the healthy one")

	byName := schedulesByName(t, s)
	require.Equal(t, store.ScheduleSkipStartFailed, byName["broken"].LastSkipReason)
	require.NotNil(t, byName["broken"].RetryAt)
	require.Equal(t, 1, taskCount(t, s), "only the healthy schedule's task; the failed start wrote nothing")
}
