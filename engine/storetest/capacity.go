package storetest

import (
	"encoding/json"
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// testIdempotencyKeyBeforeCapacity: a start whose idempotency key is taken
// returns the task holding it even when its queue is full; only starts
// that would make a task count against the queue's capacity, in a batch
// too.
func testIdempotencyKeyBeforeCapacity(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "llm", MaxWaiting: 2}))
	keyed := func(key string) *store.TaskStartParams {
		p := spec{Queue: "llm", IdempotencyKey: key, Input: json.RawMessage(`{"doc": "` + key + `"}`)}.params()
		p.RefuseKeyReuse = true // as every SDK and HTTP start
		return p
	}
	k1, err := s.TaskStart(ctx, keyed("k1"))
	require.NoError(t, err)
	k2, err := s.TaskStart(ctx, keyed("k2"))
	require.NoError(t, err)
	require.False(t, k1.Existing || k2.Existing)

	_, err = s.TaskStart(ctx, keyed("k3"))
	requireIs(t, err, store.ErrQueueFull, "a new start into the full queue")

	again, err := s.TaskStart(ctx, keyed("k1"))
	require.NoError(t, err, "a repeat of an accepted start into the full queue")
	require.Equal(t, store.TaskStartResult{ID: k1.ID, Existing: true}, again)

	// A repeat that is another start is still refused for its key, not for
	// the queue's capacity.
	other := keyed("k1")
	other.Scheduled.Input = json.RawMessage(`{"doc": "another"}`)
	_, err = s.TaskStart(ctx, other)
	requireIs(t, err, store.ErrIdempotencyKeyReused)

	// A batch of repeats only: every entry exists, none is refused.
	batch, err := s.TaskStartMany(ctx, []*store.TaskStartParams{keyed("k2"), keyed("k1"), keyed("k2")})
	require.NoError(t, err, "a batch of accepted starts into the full queue")
	require.Equal(t, []store.TaskStartResult{{ID: k2.ID, Existing: true}, {ID: k1.ID, Existing: true}, {ID: k2.ID, Existing: true}}, batch)

	// A mixed batch counts only its new entries: one new start is over the
	// bound, so the batch is refused whole.
	_, err = s.TaskStartMany(ctx, []*store.TaskStartParams{keyed("k1"), keyed("k3")})
	requireIs(t, err, store.ErrQueueFull)
	require.Equal(t, 2, taskCount(t, s), "nothing of a refused batch is written")

	// With room for one: the mixed batch's one new entry (named twice)
	// fits, the repeats are its existing tasks.
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "llm", MaxWaiting: 3}))
	batch, err = s.TaskStartMany(ctx, []*store.TaskStartParams{keyed("k1"), keyed("k3"), keyed("k2"), keyed("k3")})
	require.NoError(t, err, "one new entry fits")
	require.Equal(t, store.TaskStartResult{ID: k1.ID, Existing: true}, batch[0])
	require.False(t, batch[1].Existing)
	require.Equal(t, store.TaskStartResult{ID: k2.ID, Existing: true}, batch[2])
	require.Equal(t, store.TaskStartResult{ID: batch[1].ID, Existing: true}, batch[3])
	require.Equal(t, 3, taskCount(t, s))

	// Full again: a new start without a key is refused, a repeat is not.
	_, err = s.TaskStart(ctx, spec{Queue: "llm"}.params())
	requireIs(t, err, store.ErrQueueFull)
	again, err = s.TaskStart(ctx, keyed("k3"))
	require.NoError(t, err)
	require.Equal(t, store.TaskStartResult{ID: batch[1].ID, Existing: true}, again)
}

// testKeyPerNamespaceCountsAgainstCapacity: an idempotency key belongs to
// its namespace, so the same key in two namespaces of one batch is two new
// tasks, and each counts against its own namespace's queue.
func testKeyPerNamespaceCountsAgainstCapacity(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "tenant-b", Name: "llm", MaxWaiting: 1}))
	_, err := s.TaskStart(ctx, spec{Namespace: "tenant-b", Queue: "llm"}.params())
	require.NoError(t, err)
	keyed := func(namespace string) *store.TaskStartParams {
		p := spec{Namespace: namespace, Queue: "llm", IdempotencyKey: "k"}.params()
		p.RefuseKeyReuse = true
		return p
	}
	_, err = s.TaskStartMany(ctx, []*store.TaskStartParams{keyed(store.DefaultNamespace), keyed("tenant-b")})
	requireIs(t, err, store.ErrQueueFull, "tenant-b's queue is full; its start of key k is new there")
	require.Equal(t, 1, taskCount(t, s), "nothing of a refused batch is written")
}
