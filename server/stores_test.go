package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
)

// namedStore is one of the two stores a request is tried on.
type namedStore struct {
	name  string
	store store.Store
}

// bothStores returns a PostgreSQL store on a fresh schema and a fresh
// embedded store, in that order: the API must answer alike on either.
func bothStores(tb testing.TB) []namedStore {
	tb.Helper()
	lite, err := sqlitestore.Open(context.Background(), filepath.Join(tb.TempDir(), "cairn.db"))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = lite.Close() })
	return []namedStore{{"PostgreSQL", enginetest.Store(tb)}, {"SQLite", lite}}
}

// registerDoc registers task type "doc" at version 1 in namespace, as a
// worker would, so the API can start it.
func registerDoc(tb testing.TB, s store.Store, namespace string) {
	tb.Helper()
	err := s.TaskTypeRegister(context.Background(), &store.TaskTypeRegisterParams{Namespace: namespace, Worker: "test-worker",
		Types: []store.TaskType{{Namespace: namespace, Type: "doc", Version: 1, Queue: "default", MaxAttempts: 3}}})
	require.NoError(tb, err)
}

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

// answer is a response, its problem decoded when it is one.
type answer struct {
	status  int
	body    []byte
	problem Problem
}

// send serves one request on h, as a local client (a tokenless server
// answers only loopback Hosts). header is name/value pairs; "Host" sets
// the request's host.
func send(tb testing.TB, h http.Handler, method, target string, body []byte, header ...string) answer {
	tb.Helper()
	var r *http.Request
	if body == nil {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
	}
	r.Host = "localhost"
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			r.Host = header[i+1]
			continue
		}
		r.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(ctx))
	a := answer{status: w.Code, body: w.Body.Bytes()}
	if w.Header().Get("Content-Type") == "application/problem+json" {
		require.NoError(tb, json.Unmarshal(a.body, &a.problem), "%s", a.body)
	}
	return a
}

// taskCount is how many tasks s holds, in every namespace.
func taskCount(tb testing.TB, s store.Store) int {
	tb.Helper()
	return len(enginetest.TaskIDs(tb, s))
}

// sendHTML gets a console page and checks it is HTML with status.
func sendHTML(t *testing.T, h http.Handler, target string, status int) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Host = "localhost"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, status, w.Code, "%s: %s", target, w.Body)
	require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"), target)
	return w.Body.String()
}

// postConsole posts body with contentType to the console as one of its
// own pages would (same origin), with a bearer token when token is set.
func postConsole(t *testing.T, h http.Handler, target, contentType string, body io.Reader, token string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", target, body)
	r.Host = "localhost"
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
