package leadership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/leadership"
	"github.com/cairnflow/cairn/engine/store"
)

// next waits for the elector's next attempt.
func next(t *testing.T, e *leadership.Elector) leadership.Attempt {
	t.Helper()
	select {
	case a := <-e.Attempts():
		return a
	case <-time.After(enginetest.WaitTimeout):
		t.Fatal("no attempt")
		panic("unreachable")
	}
}

// Of two electors one leads; stopped, it resigns, and the other leads at
// its next attempt rather than when the lease runs out (an hour here).
func TestElectorLeadsAndResigns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	_, err := leadership.New(leadership.Config{Store: s, Name: "rescuer"})
	require.Error(t, err, "Owner and Interval are required")

	newElector := func(owner string, interval time.Duration) *leadership.Elector {
		t.Helper()
		e, err := leadership.New(leadership.Config{Store: s, Name: "rescuer", Owner: owner, Interval: interval, Logger: enginetest.Logger(t)})
		require.NoError(t, err)
		t.Cleanup(e.Stop)
		return e
	}
	a := newElector("a", 20*time.Minute) // a lease of an hour
	a.Stop()                             // safe before Start
	require.NoError(t, a.Start(ctx))
	require.Error(t, a.Start(ctx), "a second Start is refused")
	require.Equal(t, leadership.Attempt{Leader: true, Answered: true}, next(t, a))

	b := newElector("b", 10*time.Millisecond)
	require.NoError(t, b.Start(ctx))
	require.Equal(t, leadership.Attempt{Leader: false, Answered: true}, next(t, b), "one leader at a time")
	a.Stop()
	a.Stop() // idempotent
	enginetest.WaitFor(t, "b to lead once a resigned", func() bool { return next(t, b).Leader })
	b.Stop()
	led, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: "rescuer", Owner: "c", TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, led, "b resigned as it stopped")
}
