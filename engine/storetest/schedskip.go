package storetest

import (
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// testScheduleSkipsFullQueue: one schedule into a full queue and one into
// an unbounded queue. The healthy one fires; the full one's tick is
// skipped and recorded on its row, and it is not due again until its
// retry time (so a firer calling again at once finds nothing to do). Once
// the queue has room it fires its latest tick, and the record of the skip
// stays.
func testScheduleSkipsFullQueue(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "full", MaxWaiting: 1}))
	filler := start(t, s, spec{Queue: "full"})
	blocked := schedule(store.DefaultNamespace, "blocked")
	blocked.Cron, blocked.Queue = "@every 1s", "full"
	healthy := schedule(store.DefaultNamespace, "healthy")
	healthy.Cron = "@every 1s"
	require.NoError(t, s.ScheduleCreate(ctx, blocked))
	require.NoError(t, s.ScheduleCreate(ctx, healthy))

	// fireUntil fires due schedules until the schedule named fired (or
	// skipped) matching cond, and returns that firing; last keeps each
	// schedule's latest firing of every call.
	last := map[string]store.ScheduleFiring{}
	fireUntil := func(name, what string, cond func(store.ScheduleFiring) bool) store.ScheduleFiring {
		t.Helper()
		var got *store.ScheduleFiring
		waitFor(t, what, func() bool {
			firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
			require.NoError(t, err, "a full queue fails no firing")
			for i, f := range firings {
				last[f.Name] = f
				if got == nil && f.Name == name && cond(f) {
					got = &firings[i]
				}
			}
			return got != nil
		})
		return *got
	}
	anyFiring := func(store.ScheduleFiring) bool { return true }

	skip := fireUntil("blocked", "the blocked schedule's first tick", anyFiring)
	skippedAt := time.Now()
	require.Equal(t, store.ScheduleSkipQueueFull, skip.SkipReason)
	require.True(t, skip.Skipped())
	require.False(t, skip.Started)
	require.False(t, skip.WasSkipped, "the first skip is a change of state")
	require.True(t, skip.RetryAt.After(skip.Tick), "tried again later")
	require.False(t, skip.RetryAt.After(skip.Tick.Add(time.Second)), "no later than the next tick: %s, tick %s", skip.RetryAt, skip.Tick)

	fired := fireUntil("healthy", "the healthy schedule's first tick", anyFiring)
	require.True(t, fired.Started, "the full queue of another schedule does not stop this one")
	require.False(t, fired.Skipped())

	// Not due again before its retry time: the next due time is after the
	// skip, and firing again at once does nothing with it.
	next, ok, err := s.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{})
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.After(skip.Tick), "the next due time %s moved past the skipped tick %s", next, skip.Tick)
	if time.Now().Before(skip.RetryAt) {
		firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
		require.NoError(t, err)
		for _, f := range firings {
			require.NotEqual(t, "blocked", f.Name, "the skipped schedule is not retried before %s (skipped at %s)", skip.RetryAt, skippedAt)
		}
	}

	byName := schedulesByName(t, s)
	require.NotNil(t, byName["blocked"].RetryAt, "the row says it is skipped")
	require.True(t, byName["blocked"].RetryAt.Equal(last["blocked"].RetryAt))
	require.NotNil(t, byName["blocked"].LastSkippedAt)
	require.Equal(t, store.ScheduleSkipQueueFull, byName["blocked"].LastSkipReason)
	require.True(t, byName["blocked"].NextRunAt.Equal(last["blocked"].Tick), "it stays at the refused tick")
	require.Nil(t, byName["blocked"].LastTick, "no tick fired")
	require.Nil(t, byName["healthy"].RetryAt)
	require.Empty(t, byName["healthy"].LastSkipReason)
	require.NotNil(t, byName["healthy"].LastTick)

	// Still full at the retry: skipped again, no change of state.
	again := fireUntil("blocked", "the blocked schedule's retry", func(f store.ScheduleFiring) bool { return f.Tick.After(skip.Tick) })
	require.True(t, again.Skipped())
	require.True(t, again.WasSkipped, "a skip after a skip")

	// Room in the queue: the schedule fires its latest tick.
	got := claim(t, s, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"full"},
		Types: []store.TypeKey{defaultKey}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.Len(t, got, 1)
	require.Equal(t, filler, got[0].Task.ID)
	resumed := fireUntil("blocked", "the blocked schedule's firing once the queue has room", anyFiring)
	require.True(t, resumed.Started)
	require.False(t, resumed.Skipped())
	require.True(t, resumed.WasSkipped, "a firing after a skip: the change back")
	require.False(t, resumed.Tick.Before(again.Tick))

	byName = schedulesByName(t, s)
	require.Nil(t, byName["blocked"].RetryAt, "no longer skipped")
	require.NotNil(t, byName["blocked"].LastTick)
	require.True(t, byName["blocked"].LastTick.Equal(resumed.Tick))
	require.NotNil(t, byName["blocked"].LastSkippedAt, "the last skip stays for the operator")
	require.Equal(t, store.ScheduleSkipQueueFull, byName["blocked"].LastSkipReason)

	tasks, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Queue: "full"})
	require.NoError(t, err)
	require.Len(t, tasks, 2, "the filler and the one tick that fired")
}

func schedulesByName(t *testing.T, s store.Store) map[string]store.Schedule {
	t.Helper()
	list, err := s.ScheduleList(testContext(t), &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	out := map[string]store.Schedule{}
	for _, sc := range list {
		out[sc.Name] = sc
	}
	return out
}
