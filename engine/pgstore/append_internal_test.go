package pgstore

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

// TestAppendRounds: a batch naming each task once is one statement, in
// whatever order; a batch naming a task again goes in rounds, the k-th
// append of each task in the k-th, each round in the batch's order.
func TestAppendRounds(t *testing.T) {
	t.Parallel()
	a, b, c := uuid.UUID{1}, uuid.UUID{2}, uuid.UUID{3}
	batch := func(ids ...uuid.UUID) []*store.EventAppendParams {
		ps := make([]*store.EventAppendParams, len(ids))
		for i, id := range ids {
			ps[i] = &store.EventAppendParams{TaskID: id}
		}
		return ps
	}
	require.Nil(t, appendRounds(nil))
	require.Nil(t, appendRounds(batch(a, b, c)), "in id order (the appender's batches)")
	require.Nil(t, appendRounds(batch(c, a, b)), "in another order")
	require.Equal(t, [][]int{{0, 1, 3}, {2}}, appendRounds(batch(a, b, b, c)), "in id order, b twice")
	require.Equal(t, [][]int{{0, 1, 2}, {3, 5}, {4}}, appendRounds(batch(c, a, b, a, a, c)))
}
