package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

// blobTests: the blobs table, payloads kept out of the history.
var blobTests = []conformanceTest{
	{"BlobsAreWrittenOnceAndReadInTheirNamespace", testBlobPutGet},
	{"BlobsGoWithTheirTaskWhenRetentionRemovesIt", testBlobsRemovedWithTask},
	{"AStartWritesItsBlobsOnlyWithTheTaskItCreates", testStartBlobs},
}

func testStartBlobs(t *testing.T, s store.Store) {
	ctx := testContext(t)
	startWith := func(key string, blobKeys ...string) store.TaskStartResult {
		t.Helper()
		p := spec{IdempotencyKey: key}.params()
		p.ID = uuid.Must(uuid.NewV7())
		for _, k := range blobKeys {
			p.Blobs = append(p.Blobs, &store.Blob{Namespace: store.DefaultNamespace, Key: k, TaskID: p.ID,
				ContentType: "application/json", SHA256: []byte("sum"), Data: []byte(`"` + k + `"`)})
		}
		res, err := s.TaskStart(ctx, p)
		require.NoError(t, err)
		return res
	}
	first := startWith("k", "in-1", "in-2")
	for _, k := range []string{"in-1", "in-2"} {
		got, err := s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: k})
		require.NoError(t, err, k)
		require.Equal(t, first.ID, got.TaskID)
		require.Equal(t, `"`+k+`"`, string(got.Data))
	}
	dup := startWith("k", "in-3")
	require.True(t, dup.Existing)
	_, err := s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "in-3"})
	require.ErrorIs(t, err, store.ErrNotFound, "a start that made no task wrote no blob")

	batch := []*store.TaskStartParams{spec{}.params(), spec{IdempotencyKey: "k"}.params()}
	for i, p := range batch {
		p.ID = uuid.Must(uuid.NewV7())
		p.Blobs = []*store.Blob{{Namespace: store.DefaultNamespace, Key: fmt.Sprintf("batch-%d", i), TaskID: p.ID, SHA256: []byte("x"), Data: []byte("1")}}
	}
	res, err := s.TaskStartMany(ctx, batch)
	require.NoError(t, err)
	require.False(t, res[0].Existing)
	require.True(t, res[1].Existing)
	_, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "batch-0"})
	require.NoError(t, err)
	_, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "batch-1"})
	require.ErrorIs(t, err, store.ErrNotFound)

	orphan := spec{}.params()
	orphan.Blobs = []*store.Blob{{Namespace: store.DefaultNamespace, Key: "x", SHA256: []byte("x"), Data: []byte("1")}}
	_, err = s.TaskStart(ctx, orphan)
	require.Error(t, err, "blobs need the start's ID")
}

func testBlobPutGet(t *testing.T, s store.Store) {
	ctx := testContext(t)
	owner := start(t, s, spec{})
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 300_000) // 1.2 MB, NUL bytes included
	b := &store.BlobPutParams{Namespace: store.DefaultNamespace, Key: "k1", TaskID: owner, ContentType: "application/pdf",
		SHA256: []byte("0123456789abcdef0123456789abcdef"), Data: data}
	require.NoError(t, s.BlobPut(ctx, b))
	got, err := s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "k1"})
	require.NoError(t, err)
	require.Equal(t, owner, got.TaskID)
	require.Equal(t, "application/pdf", got.ContentType)
	require.Equal(t, b.SHA256, got.SHA256)
	require.True(t, bytes.Equal(data, got.Data), "the bytes as written")
	require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)

	err = s.BlobPut(ctx, &store.BlobPutParams{Namespace: store.DefaultNamespace, Key: "k1", TaskID: owner, SHA256: b.SHA256, Data: []byte("x")})
	require.ErrorIs(t, err, store.ErrConflict, "a key is written once")
	got, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "k1"})
	require.NoError(t, err)
	require.Len(t, got.Data, len(data), "the refused put changed nothing")

	_, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: "tenant-b", Key: "k1"})
	require.ErrorIs(t, err, store.ErrNotFound, "another namespace's blob is not found")
	_, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.BlobGet(ctx, &store.BlobGetParams{Key: "k1"})
	require.Error(t, err, "the namespace is required")
	keys, err := s.BlobKeysByTasks(ctx, &store.BlobKeysByTasksParams{Namespace: store.DefaultNamespace, IDs: []uuid.UUID{owner}})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID][]string{owner: {"k1"}}, keys)
	keys, err = s.BlobKeysByTasks(ctx, &store.BlobKeysByTasksParams{Namespace: "tenant-b", IDs: []uuid.UUID{owner}})
	require.NoError(t, err)
	require.Empty(t, keys, "another namespace's blobs are not listed")
	_, err = s.BlobKeysByTasks(ctx, &store.BlobKeysByTasksParams{IDs: []uuid.UUID{owner}})
	require.Error(t, err, "the namespace is required")
	require.NoError(t, s.BlobPut(ctx, &store.BlobPutParams{Namespace: store.DefaultNamespace, Key: "empty", TaskID: owner, SHA256: b.SHA256, Data: []byte{}}))
	got, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "empty"})
	require.NoError(t, err)
	require.Empty(t, got.Data)
	require.Empty(t, got.ContentType)
}

func testBlobsRemovedWithTask(t *testing.T, s store.Store) {
	ctx := testContext(t)
	done := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	kept := start(t, s, spec{})
	for key, owner := range map[string]uuid.UUID{"of-done": done, "of-kept": kept} {
		require.NoError(t, s.BlobPut(ctx, &store.BlobPutParams{Namespace: store.DefaultNamespace, Key: key, TaskID: owner,
			SHA256: []byte("x"), Data: []byte(key)}))
	}
	require.Equal(t, 1, removeFinished(t, s, time.Now().Add(time.Hour), 10).Tasks)
	_, err := s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "of-done"})
	require.ErrorIs(t, err, store.ErrNotFound, "the removed task's blob went with it")
	_, err = s.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: "of-kept"})
	require.NoError(t, err)
}
