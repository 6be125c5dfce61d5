package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSkippedTickRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 10, 20, 0, 0, time.UTC)
	hourly := &Schedule{Name: "hourly", Cron: "@hourly", NextRunAt: time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)}
	ticks, err := ScheduleDueTicks(hourly, now)
	require.NoError(t, err)
	// The hint comes first: tried again after it.
	require.Equal(t, now.Add(30*time.Second), ticks.RetryAt(30*time.Second))
	// The next tick comes first: tried at the tick.
	require.Equal(t, time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC), ticks.RetryAt(5*time.Minute*100))
	// No hint: not at once.
	require.Equal(t, now.Add(minSkippedTickRetry), ticks.RetryAt(0))
}

// The latest missed tick fires, once; the schedule moves to the first
// tick after now.
func TestScheduleDueTicks(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 10, 20, 0, 0, time.UTC)
	sc := &Schedule{Name: "hourly", Cron: "@hourly", NextRunAt: time.Date(2025, 3, 1, 7, 0, 0, 0, time.UTC)}
	ticks, err := ScheduleDueTicks(sc, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC), ticks.Tick)
	require.Equal(t, time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC), ticks.Next)
	_, err = ScheduleDueTicks(&Schedule{Name: "bad", Cron: "not a cron"}, now)
	require.Error(t, err)
}
