package leadership_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// tinyTTL is a lease that has expired by the time anything reads it.
const tinyTTL = time.Millisecond

func TestLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	attempt := func(name, owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: name, Owner: owner, TTL: ttl})
		require.NoError(t, err)
		return ok
	}

	require.True(t, attempt("rescuer", "a", time.Hour))
	require.False(t, attempt("rescuer", "b", time.Hour), "one owner at a time")
	require.True(t, attempt("rescuer", "a", time.Hour), "the owner renews")
	require.True(t, attempt("cron", "b", time.Hour), "roles are independent")

	t.Log("resign hands over at once; resigning a lease one does not hold does nothing")
	require.NoError(t, s.LeaderResign(ctx, &store.LeaderResignParams{Name: "rescuer", Owner: "b"}))
	require.False(t, attempt("rescuer", "b", time.Hour))
	require.NoError(t, s.LeaderResign(ctx, &store.LeaderResignParams{Name: "rescuer", Owner: "a"}))
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
			ok, err := s.LeaderAttempt(context.Background(), &store.LeaderAttemptParams{Name: "rescuer", Owner: fmt.Sprintf("owner-%d", i), TTL: time.Hour})
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
