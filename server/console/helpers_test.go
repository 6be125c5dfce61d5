package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// TestMain fails the test binary if any test leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}

// namedStore is one of the two stores a page is tried on.
type namedStore struct {
	name  string
	store store.Store
}

// bothStores returns a PostgreSQL store on a fresh schema and a fresh
// embedded store, in that order: the console must show alike on either.
func bothStores(tb testing.TB) []namedStore {
	tb.Helper()
	return []namedStore{{"PostgreSQL", enginetest.Store(tb)}, {"SQLite", liteStore(tb)}}
}

// liteStore is a fresh embedded store.
func liteStore(tb testing.TB) store.Store {
	tb.Helper()
	lite, err := sqlitestore.Open(context.Background(), filepath.Join(tb.TempDir(), "cairn.db"))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = lite.Close() })
	return lite
}

// registerDoc registers task type "doc" at version 1 in namespace, as a
// worker would, so tasks of it can start.
func registerDoc(tb testing.TB, s store.Store, namespace string) {
	tb.Helper()
	err := s.TaskTypeRegister(context.Background(), &store.TaskTypeRegisterParams{Namespace: namespace, Worker: "test-worker",
		Types: []store.TaskType{{Namespace: namespace, Type: "doc", Version: 1, Queue: "default", MaxAttempts: 3}}})
	require.NoError(tb, err)
}

// newTestConsole is a console over st with cfg, acting through a client
// a namespace as a server's: made on first use, answering payloads kept
// by reference as references.
func newTestConsole(tb testing.TB, st store.Store, cfg Config) *Console {
	tb.Helper()
	var mu sync.Mutex
	clients := map[string]*sdk.Client{}
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clients {
			c.Close()
		}
	})
	cfg.Client = func(namespace string) (*sdk.Client, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[namespace]; ok {
			return c, nil
		}
		c, err := sdk.NewClient(sdk.ClientConfig{Store: st, Namespace: namespace, Identity: "api",
			MaxPayloadBytes: cfg.MaxPayloadBytes, OutputsByReference: true})
		if err != nil {
			return nil, err
		}
		clients[namespace] = c
		return c, nil
	}
	con, err := New(cfg)
	require.NoError(tb, err)
	return con
}

// testConsole is a console over st, with tokens.
func testConsole(tb testing.TB, st store.Store, tokens ...web.Token) http.Handler {
	tb.Helper()
	return newTestConsole(tb, st, Config{Tokens: tokens})
}

// consoleServer is a console over an empty embedded store, for rendering.
func consoleServer(t *testing.T) (*Console, store.Store) {
	t.Helper()
	lite := liteStore(t)
	return newTestConsole(t, lite, Config{}), lite
}

// answer is a response, its problem decoded when it is one.
type answer struct {
	status  int
	body    []byte
	problem web.Problem
}

// send serves one request on h, as a local client (a tokenless console
// answers only loopback Hosts). header is name/value pairs.
func send(tb testing.TB, h http.Handler, method, target string, body []byte, header ...string) answer {
	tb.Helper()
	var r *http.Request
	if body == nil {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(string(body)))
	}
	r.Host = "localhost"
	for i := 0; i+1 < len(header); i += 2 {
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

// startDoc starts a "doc" task (registered with registerDoc) in the
// default namespace of st, with an empty input, as POST /v1/tasks would.
func startDoc(t *testing.T, st store.Store) uuid.UUID {
	t.Helper()
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	defer c.Close()
	ref, err := c.RegisteredType(context.Background(), "doc", 0)
	require.NoError(t, err)
	res, err := c.StartDynamic(context.Background(), ref, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	return res.ID
}

// claimDoc claims the one due "doc" task of the default namespace.
func claimDoc(t *testing.T, s store.Store) *store.ClaimedTask {
	t.Helper()
	claimed, err := s.TaskClaimMany(context.Background(), &store.TaskClaimManyParams{Namespace: "default", Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, claimed[0].Err)
	return claimed[0]
}

// appendFor appends payloads for ct's attempt.
func appendFor(t *testing.T, s store.Store, ct *store.ClaimedTask, payloads ...history.Payload) history.State {
	t.Helper()
	st, err := s.EventAppend(context.Background(), &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State,
		Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt, Payloads: payloads})
	require.NoError(t, err)
	return st
}

// startWaiting starts a doc task and ends its first attempt waiting for
// the signal name for an hour, as a workflow's receive does.
func startWaiting(t *testing.T, s store.Store, name string) uuid.UUID {
	t.Helper()
	id := startDoc(t, s)
	ct := claimDoc(t, s)
	require.Equal(t, id, ct.Task.ID)
	appendFor(t, s, ct, history.WaitStartedData{Name: name, Position: 0, Deadline: time.Now().Add(time.Hour)})
	return id
}

// eventCount is how many events task id's history holds.
func eventCount(t *testing.T, st store.Store, id uuid.UUID) int {
	t.Helper()
	events, err := st.EventListByTask(context.Background(), id)
	require.NoError(t, err)
	return len(events)
}

// signalsOf is the signals in task id's history.
func signalsOf(t *testing.T, st store.Store, id uuid.UUID) []history.SignalReceivedData {
	t.Helper()
	events, err := st.EventListByTask(context.Background(), id)
	require.NoError(t, err)
	var sigs []history.SignalReceivedData
	for _, e := range events {
		if sig, ok := e.Data.(history.SignalReceivedData); ok {
			sigs = append(sigs, sig)
		}
	}
	return sigs
}
