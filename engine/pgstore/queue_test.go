package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func taskCount(t *testing.T, s *pgstore.Store) int {
	t.Helper()
	return len(enginetest.TaskIDs(t, s))
}

func TestBoundedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "default", Name: "llm", MaxWaiting: 3}))
	llm := &enginetest.TaskOpts{Queue: "llm"}
	enginetest.StartTasks(t, s, 2, llm)

	// Two more would pass the bound: the batch is refused whole.
	_, err := s.TaskStartMany(ctx, []*store.TaskStartParams{llm.Params(), llm.Params()})
	require.True(t, errors.Is(err, store.ErrQueueFull), "%v", err)
	var full *store.QueueFullError
	require.True(t, errors.As(err, &full))
	require.Equal(t, store.QueueFullError{Namespace: "default", Queue: "llm", Waiting: 2, MaxWaiting: 3, Adding: 2,
		RetryAfter: 30 * time.Second}, *full, "no task of the queue runs: room is not near")
	require.Contains(t, err.Error(), "queue default/llm is full: 2 waiting")
	require.Equal(t, 2, taskCount(t, s), "nothing of a refused start is written")

	enginetest.StartTask(t, s, llm)
	_, err = s.TaskStart(ctx, llm.Params())
	require.True(t, errors.Is(err, store.ErrQueueFull), "%v", err)
	// Other queues, and other namespaces' queue of the same name, are not bounded.
	enginetest.StartTask(t, s, nil)
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "llm", Namespace: "tenant-b"})
	require.Equal(t, 5, taskCount(t, s))

	// A claimed task no longer waits: there is room again.
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"llm"},
		Types: []store.TypeKey{llm.TypeKey()}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	enginetest.StartTask(t, s, llm)
	_, err = s.TaskStart(ctx, llm.Params())
	require.True(t, errors.As(err, &full))
	// One task running for a moment: room soon, not the idle answer.
	require.GreaterOrEqual(t, full.RetryAfter, 100*time.Millisecond, "the hint's floor")
	require.Less(t, full.RetryAfter, 30*time.Second, "a queue being served is not idle")

	queues, err := s.QueueList(ctx, &store.QueueListParams{Namespace: "default"})
	require.NoError(t, err)
	require.Equal(t, []store.QueueInfo{{QueueConfig: store.QueueConfig{Namespace: "default", Name: "llm", MaxWaiting: 3},
		Waiting: 3, Running: 1}}, queues)
	enginetest.RequireProjectionsMatch(t, s)
}

// Concurrent starts cannot squeeze past the bound together.
func TestBoundedQueueUnderConcurrentStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "default", Name: "q", MaxWaiting: 5}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Queue: "q"}).Params())
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, store.ErrQueueFull) {
				refused++
				return
			}
			require.NoError(t, err)
			accepted++
		}()
	}
	wg.Wait()
	require.Equal(t, 5, accepted)
	require.Equal(t, 15, refused)
	require.Equal(t, 5, taskCount(t, s))
}

func TestStartTxIntoBoundedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "default", Name: "q", MaxWaiting: 1}))
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = s.WithTx(tx).TaskStart(ctx, (&enginetest.TaskOpts{Queue: "q"}).Params())
	require.NoError(t, err)
	_, err = s.WithTx(tx).TaskStart(ctx, (&enginetest.TaskOpts{Queue: "q"}).Params())
	require.True(t, errors.Is(err, store.ErrQueueFull), "%v", err)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, taskCount(t, s))

	require.Error(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "default", Name: "q", MaxWaiting: -1}))
}

// A claim that started before another but locked the rate-limit row after
// it sees that one's refill time ahead of its own transaction's start: the
// bucket must not go negative (it once made the claim's LIMIT negative).
func TestRateLimitRefillTimeAheadOfTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: "default", TaskType: "test", MaxStarts: 5, Per: time.Second}))
	enginetest.StartTasks(t, s, 3, nil)
	_, err := s.Pool().Exec(ctx, "UPDATE "+enginetest.TableName(s, "rate_limits")+" SET tokens = 0, refilled_at = now() + interval '1 second'")
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, enginetest.ClaimParams("w", 3, time.Minute))
	claimed := claimedRes.Tasks
	require.NoError(t, err, "an empty bucket claims nothing, without error")
	require.Empty(t, claimed)
	require.Eventually(t, func() bool {
		claimedRes, err := s.TaskClaim(ctx, enginetest.ClaimParams("w", 3, time.Minute))
		claimed := claimedRes.Tasks
		require.NoError(t, err)
		return len(claimed) > 0
	}, 10*time.Second, 50*time.Millisecond, "the bucket refills once its clock is passed")
	enginetest.RequireProjectionsMatch(t, s)
}
