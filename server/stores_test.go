package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
)

// testServer is a handler over a store, without its background work
// (nothing here waits for a task).
func testServer(tb testing.TB, s store.Store, tokens ...Token) http.Handler {
	tb.Helper()
	return testServerKeys(tb, s, nil, tokens...)
}

// testServerKeys is testServer encrypting with keys.
func testServerKeys(tb testing.TB, s store.Store, keys *seal.Keys, tokens ...Token) http.Handler {
	tb.Helper()
	srv, err := New(Config{Store: s, Keys: keys, Tokens: tokens})
	require.NoError(tb, err)
	return srv.Handler()
}

// putBlob writes data as a blob of task id of namespace straight into the
// store, as a worker without a payload stage of its own would have, and
// returns its reference.
func putBlob(tb testing.TB, s store.Store, namespace string, id uuid.UUID, contentType string, data []byte) history.BlobRef {
	tb.Helper()
	ref, b, err := payload.NewBlob(namespace, id, contentType, data)
	require.NoError(tb, err)
	require.NoError(tb, s.BlobPut(context.Background(), &store.BlobPutParams{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID,
		ContentType: b.ContentType, SHA256: b.SHA256, Data: b.Data}))
	return ref
}

// taskCount is how many tasks s holds, in every namespace.
func taskCount(tb testing.TB, s store.Store) int {
	tb.Helper()
	return len(enginetest.TaskIDs(tb, s))
}
