// Package servertest holds the test helpers the tests of server and of
// server/console share: the two stores a request is tried on, a
// registered "doc" task type and its claim, requests served as a local
// client would send them, and reads of a task's history.
//
// Test-only: imported from _test.go files only, never by code that ships
// (integration/imports_test.go checks it).
package servertest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/web"
)

// NamedStore is one of the two stores a request is tried on.
type NamedStore struct {
	Name  string
	Store store.Store
}

// BothStores returns a PostgreSQL store on a fresh schema and a fresh
// embedded store, in that order: the API and the console must answer
// alike on either.
func BothStores(tb testing.TB) []NamedStore {
	tb.Helper()
	return []NamedStore{{"PostgreSQL", enginetest.Store(tb)}, {"SQLite", LiteStore(tb)}}
}

// LiteStore is a fresh embedded store, closed when the test ends.
func LiteStore(tb testing.TB) store.Store {
	tb.Helper()
	return enginetest.SQLiteStore(tb)
}

// RegisterDoc registers task type "doc" at version 1 in namespace, as a
// worker would, so tasks of it can start.
func RegisterDoc(tb testing.TB, s store.Store, namespace string) {
	tb.Helper()
	err := s.TaskTypeRegister(context.Background(), &store.TaskTypeRegisterParams{Namespace: namespace, Worker: "test-worker",
		Types: []store.TaskType{{Namespace: namespace, Type: "doc", Version: 1, Queue: "default", MaxAttempts: 3}}})
	require.NoError(tb, err)
}

// ClaimDoc claims the one due "doc" task of the default namespace.
func ClaimDoc(tb testing.TB, s store.Store) *store.ClaimedTask {
	tb.Helper()
	res, err := s.TaskClaim(context.Background(), &store.TaskClaimParams{Namespace: "default", Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.NoError(tb, err)
	claimed := res.Tasks
	require.Len(tb, claimed, 1)
	require.NoError(tb, claimed[0].Err)
	return claimed[0]
}

// AppendFor appends payloads for ct's attempt.
func AppendFor(tb testing.TB, s store.Store, ct *store.ClaimedTask, payloads ...history.Payload) history.State {
	tb.Helper()
	st, err := s.EventAppend(context.Background(), &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State,
		Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt, Payloads: payloads})
	require.NoError(tb, err)
	return st
}

// EventCount is how many events task id's history holds.
func EventCount(tb testing.TB, st store.Store, id uuid.UUID) int {
	tb.Helper()
	events, err := store.TaskEvents(context.Background(), st, "", id)
	require.NoError(tb, err)
	return len(events)
}

// SignalsOf is the signals in task id's history.
func SignalsOf(tb testing.TB, st store.Store, id uuid.UUID) []history.SignalReceivedData {
	tb.Helper()
	events, err := store.TaskEvents(context.Background(), st, "", id)
	require.NoError(tb, err)
	var sigs []history.SignalReceivedData
	for _, e := range events {
		if sig, ok := e.Data.(history.SignalReceivedData); ok {
			sigs = append(sigs, sig)
		}
	}
	return sigs
}

// Answer is a response, its problem decoded when it is one.
type Answer struct {
	Status  int
	Body    []byte
	Problem web.Problem
}

// Send serves one request on h, as a local client (a tokenless server or
// console answers only loopback Hosts), a body as JSON. header is
// name/value pairs; "Host" sets the request's host.
func Send(tb testing.TB, h http.Handler, method, target string, body []byte, header ...string) Answer {
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
	a := Answer{Status: w.Code, Body: w.Body.Bytes()}
	if w.Header().Get("Content-Type") == "application/problem+json" {
		require.NoError(tb, json.Unmarshal(a.Body, &a.Problem), "%s", a.Body)
	}
	return a
}

// SendHTML gets a console page and checks it is HTML with status.
func SendHTML(tb testing.TB, h http.Handler, target string, status int) string {
	tb.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Host = "localhost"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(tb, status, w.Code, "%s: %s", target, w.Body)
	require.Equal(tb, "text/html; charset=utf-8", w.Header().Get("Content-Type"), target)
	return w.Body.String()
}

// PostConsole posts body with contentType to the console as one of its
// own pages would (same origin), with a bearer token when token is set.
func PostConsole(tb testing.TB, h http.Handler, target, contentType string, body io.Reader, token string) *httptest.ResponseRecorder {
	tb.Helper()
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
