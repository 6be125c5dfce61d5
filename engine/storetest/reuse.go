package storetest

import (
	"encoding/json"
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testIdempotencyKeyReuseRefused: with RefuseKeyReuse, a taken key returns
// the existing task only for the same start (type, and input of the same
// JSON value however written); any other start with it is refused with
// ErrIdempotencyKeyReused, names no task, and writes nothing, also in a
// batch.
func testIdempotencyKeyReuseRefused(t *testing.T, s store.Store) {
	ctx := testContext(t)
	strict := func(sp spec) *store.TaskStartParams {
		p := sp.params()
		p.RefuseKeyReuse = true
		return p
	}
	first, err := s.TaskStart(ctx, strict(spec{IdempotencyKey: "k", Input: json.RawMessage(`{"b": [1, 2.50], "a": "x"}`)}))
	require.NoError(t, err)
	require.False(t, first.Existing)

	// The same value, written otherwise: the same start.
	again, err := s.TaskStart(ctx, strict(spec{IdempotencyKey: "k", Input: json.RawMessage(`{"a":"x","b":[1.0e0,25e-1]}`)}))
	require.NoError(t, err)
	require.Equal(t, store.TaskStartResult{ID: first.ID, Existing: true}, again)

	requireReused := func(res store.TaskStartResult, err error, what string) {
		t.Helper()
		require.True(t, errors.Is(err, store.ErrIdempotencyKeyReused), "%s: %v", what, err)
		require.Equal(t, store.TaskStartResult{}, res, "%s: no task named", what)
		require.NotContains(t, err.Error(), first.ID.String(), what)
	}
	res, err := s.TaskStart(ctx, strict(spec{IdempotencyKey: "k", Input: json.RawMessage(`{"a":"y","b":[1,2.5]}`)}))
	requireReused(res, err, "another input")
	res, err = s.TaskStart(ctx, strict(spec{IdempotencyKey: "k", Type: "other", Input: json.RawMessage(`{"a":"x","b":[1,2.5]}`)}))
	requireReused(res, err, "another type")
	res, err = s.TaskStart(ctx, strict(spec{IdempotencyKey: "k"}))
	requireReused(res, err, "no input")

	// A batch with one reuse writes none of its starts.
	_, err = s.TaskStartMany(ctx, []*store.TaskStartParams{
		strict(spec{IdempotencyKey: "fresh", Input: json.RawMessage(`1`)}),
		strict(spec{Input: json.RawMessage(`2`)}),
		strict(spec{IdempotencyKey: "k", Input: json.RawMessage(`3`)}),
	})
	require.True(t, errors.Is(err, store.ErrIdempotencyKeyReused), "%v", err)
	_, err = s.TaskStartMany(ctx, []*store.TaskStartParams{
		strict(spec{IdempotencyKey: "twice", Input: json.RawMessage(`"first"`)}),
		strict(spec{IdempotencyKey: "twice", Input: json.RawMessage(`"second"`)}),
	})
	require.True(t, errors.Is(err, store.ErrIdempotencyKeyReused), "a reuse within the batch: %v", err)
	require.Equal(t, 1, taskCount(t, s), "the refused starts wrote nothing")
	require.Len(t, events(t, s, first.ID), 1, "nothing appended to the existing task")

	// The same start twice in a batch is one task.
	batch, err := s.TaskStartMany(ctx, []*store.TaskStartParams{
		strict(spec{IdempotencyKey: "twice", Input: json.RawMessage(`"same"`)}),
		strict(spec{IdempotencyKey: "twice", Input: json.RawMessage(` "same" `)}),
		strict(spec{IdempotencyKey: "k", Input: json.RawMessage(`{"b":[1,2.5],"a":"x"}`)}),
	})
	require.NoError(t, err)
	require.False(t, batch[0].Existing)
	require.Equal(t, store.TaskStartResult{ID: batch[0].ID, Existing: true}, batch[1])
	require.Equal(t, store.TaskStartResult{ID: first.ID, Existing: true}, batch[2])
	require.Len(t, map[uuid.UUID]bool{first.ID: true, batch[0].ID: true}, 2)
	require.Equal(t, 2, taskCount(t, s))
}
