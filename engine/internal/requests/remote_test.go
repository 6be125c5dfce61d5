package requests_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// A task that finished while a claim of its remote step still wrote its
// streams (its workflow ended without the step): the rescuer's sweep
// removes the claim's row and rewinds what it wrote, so a reader is not
// left with chunks no outcome will close.
func TestSweepRewindsTheStreamsOfFinishedTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, nil)
	require.NoError(t, s.RemoteStepInsert(ctx, &store.RemoteStepInsertParams{Steps: []store.RemoteStep{{
		Namespace: store.DefaultNamespace, TaskID: id, Position: 0, Name: "ocr.page", Queue: "ocr", Attempt: 1,
		Input: []byte(`1`), HeartbeatTimeout: time.Minute}}}))
	claimed, err := s.RemoteStepClaim(ctx, &store.RemoteStepClaimParams{Namespace: store.DefaultNamespace, Queue: "ocr", Max: 1, Worker: "py-1"})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ref := store.RemoteStepRef{Namespace: store.DefaultNamespace, TaskID: id, Position: 0, Nonce: claimed[0].Nonce}
	_, err = s.RemoteStreamAppend(ctx, &store.RemoteStreamAppendParams{Ref: ref, Chunks: []store.RemoteChunk{{Stream: "tokens", Data: []byte(`"half"`)}}, Bytes: 6})
	require.NoError(t, err)

	ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
	_, err = enginetest.AppendFenced(ctx, s, ct, history.TaskCompletedData{Output: []byte(`1`)})
	require.NoError(t, err)
	_, err = requests.ExpireRemote(ctx, s, 100, true)
	require.NoError(t, err)

	entries, err := s.StreamRead(ctx, &store.StreamReadParams{Namespace: store.DefaultNamespace, TaskID: id})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, store.StreamRewind, entries[1].Kind)
	require.Equal(t, [3]any{"tokens", 1, 0}, [3]any{entries[1].Stream, entries[1].Attempt, entries[1].Position})
	_, err = s.RemoteStepHeartbeat(ctx, &ref)
	require.ErrorIs(t, err, store.ErrNotFound, "the row is gone")
}
