package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/stretchr/testify/require"
)

// FuzzDecodeStartRequest: a body of POST /v1/tasks goes through decodeBody
// (under a size limit) and decodeJSON into a startRequest, then through
// startOpts with a traceparent header. Nothing panics; every rejection is a
// problem with status 400 or 413 (413 exactly when the body is over the
// limit), a known code, a title and a detail, and it is written as
// problem+json; an accepted request gives start options that say what it
// said, and met the strict rules (valid UTF-8, no lone surrogate, no
// member twice, exact field names).
//
// Then the same request goes to a handler over PostgreSQL and one over the
// embedded store, each in a namespace of its own where task type "doc" is
// registered: both answer the same status and problem code, never a 5xx,
// and a task both accepted reads back the same from both (type, queue, key
// and the other strings byte for byte, the input in canonical form, equal
// to the input sent). A listing with the traceparent string as ?type= is
// answered alike too.
func FuzzDecodeStartRequest(f *testing.F) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, seed := range []struct {
		body, traceparent string
	}{
		{`{"type":"invoice.extract","input":{"invoice":42}}`, ""},
		{`{"type":"invoice.extract","version":2,"input":{"url":"s3://b/k"},"idempotency_key":"inv-42","queue":"docs","priority":5,
		  "delay":"90s","trace_id":"abc","labels":{"tenant":"acme"},"fairness_key":"acme","fairness_weight":3,"max_attempts":4,
		  "deadline":"2026-11-30T12:00:00Z","start_deadline":"2026-11-29T13:00:00+01:00"}`, tp},
		{`{"type":"t","run_at":"2026-11-29T12:00:00Z"}`, tp},
		{`{"type":"t","run_at":"2026-11-29T12:00:00Z","delay":"1m"}`, ""},
		{`{"type":"t","delay":"-1s"}`, ""},
		{`{"type":"t","delay":"forever"}`, ""},
		{`{"type":"t","run_at":"tomorrow"}`, ""},
		{`{"type":"t","run_at":"2026-13-45T99:00:00Z"}`, ""},
		{`{"type":"t"}`, "00-xyz"},
		{`{"type":"t","trace_id":"mine"}`, "garbage"},
		{`{"type":"t","nope":1}`, ""},
		{`{"type":"t","Type":"u"}`, ""},
		{`{"type":1}`, ""},
		{`{"type":"t","priority":1e400}`, ""},
		{`{"type":"t","priority":1.5}`, ""},
		{`{"type":"t","labels":{"a":1}}`, ""},
		{`{"type":"t","input":}`, ""},
		{`{"type":"t"} {"type":"u"}`, ""},
		{`{"type":"t"}]`, ""},
		{`{"type":"t"} x`, ""},
		{`{"type":"t"`, ""},
		{`[]`, ""},
		{`null`, ""},
		{`"t"`, ""},
		{``, ""},
		{` `, ""},
		{"\xff", ""},
		{`{"type":"\ud800","labels":{"\u0000":"x"}}`, ""},
		{`{"input":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, ""},
		// The findings: each once a 500 on PostgreSQL and a 202 on SQLite,
		// or read leniently.
		{`{"type":"doc","input":{"id":"\ud800"}}`, ""},
		{"{\"type\":\"doc\",\"input\":{\"id\":\"a\xffb\"}}", ""},
		{`{"Type":"doc"}`, "\x00"},
		{`{"type":"doc","type":"doc"}`, "\xff"},
		{"{\"type\":\"doc\",\"idempotency_key\":\"a\xffb\"}", ""},
		{`{"type":"doc","idempotency_key":"a\ufffdb"}`, "doc"},
		{`{"type":"doc","input":{"n":1e1000000}}`, ""},
		{`{"type":"doc","input":{"b":[1,2.50],"a":"x","s":"\ud83d\ude00\u00e9"},"idempotency_key":"k","queue":"q","labels":{"tenant":"acme"}}`, tp},
		{`{"type":"doc","input":-0.0e-5,"priority":-3,"max_attempts":2,"fairness_key":"f","fairness_weight":2}`, ""},
		{`{"type":"doc","input":"\u0000"}`, ""},
		{`{"type":"doc","labels":{"k":"\ud800"}}`, ""},
	} {
		f.Add([]byte(seed.body), seed.traceparent, uint16(4096))
		f.Add([]byte(seed.body), seed.traceparent, uint16(len(seed.body)/2))
	}

	stores := servertest.BothStores(f)
	handlers := make([]http.Handler, len(stores))
	for i, st := range stores {
		handlers[i] = testServer(f, st.Store)
	}
	var namespaces atomic.Int64

	f.Fuzz(func(t *testing.T, body []byte, traceparent string, limit uint16) {
		checkDecoding(t, body, traceparent, limit)
		ns := "fuzz-" + strconv.FormatInt(namespaces.Add(1), 10)
		sameOnBothStores(t, stores, handlers, ns, body, traceparent)
	})
}

// checkDecoding is the first half of [FuzzDecodeStartRequest]: the
// decoding alone.
func checkDecoding(t *testing.T, body []byte, traceparent string, limit uint16) {
	// Through decodeBody, as the handler reads it.
	var viaBody startRequest
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/tasks", bytes.NewReader(body))
	p := decodeBody(w, r, int64(limit), &viaBody, false)
	if len(body) > int(limit) {
		require.NotNil(t, p, "a body over the limit was accepted")
		requireProblem(t, p, http.StatusRequestEntityTooLarge)
	} else if p != nil {
		requireProblem(t, p, http.StatusBadRequest)
	}

	// And decodeJSON with no limit.
	var req startRequest
	p = decodeJSON(body, &req)
	if p != nil {
		requireProblem(t, p, http.StatusBadRequest)
		return
	}
	if len(body) <= int(limit) {
		require.Equal(t, req, viaBody)
	}
	// One JSON value and nothing after it (`{"type":"t"}]` was once
	// accepted: dec.More() does not see a stray ']' or '}').
	require.True(t, json.Valid(body), "accepted a body that is not one JSON value: %q", body)

	opts, p := req.startOpts(traceparent)
	if p != nil {
		require.Zero(t, opts)
		requireProblem(t, p, http.StatusBadRequest)
		return
	}
	require.GreaterOrEqual(t, opts.Delay, time.Duration(0))
	if req.Delay != "" {
		require.Nil(t, req.RunAt, "run_at and delay both accepted")
	}
	if req.RunAt != nil {
		require.True(t, opts.RunAt.Equal(*req.RunAt))
	}
	switch {
	case req.TraceID != "":
		require.Equal(t, req.TraceID, opts.TraceID)
	case traceparent != "":
		require.Equal(t, traceparent, opts.TraceID)
		require.True(t, traceparentRE.MatchString(traceparent))
	default:
		require.Empty(t, opts.TraceID)
	}
	require.Equal(t, req.IdempotencyKey, opts.IdempotencyKey)
	require.Equal(t, req.Queue, opts.Queue)
	require.Equal(t, req.Priority, opts.Priority)
	require.Equal(t, req.MaxAttempts, opts.MaxAttempts)
	// Accepted: strict all through.
	require.NoError(t, jsoncheck.Check(body, ""), "accepted %q", body)
	require.Nil(t, exactNames(body, reflect.TypeFor[startRequest](), ""), "accepted %q", body)
}

// sameOnBothStores is the second half of [FuzzDecodeStartRequest]: body
// and a listing, sent to a handler over each store in namespace ns.
func sameOnBothStores(t *testing.T, stores []servertest.NamedStore, handlers []http.Handler, ns string, body []byte, traceparent string) {
	answers := make([]servertest.Answer, len(stores))
	for i, st := range stores {
		servertest.RegisterDoc(t, st.Store, ns)
		answers[i] = servertest.Send(t, handlers[i], http.MethodPost, "/v1/tasks?namespace="+ns, body, "traceparent", traceparent)
		require.Less(t, answers[i].Status, 500, "%s answered %q with %s", st.Name, body, answers[i].Body)
	}
	pg, lite := answers[0], answers[1]
	require.Equal(t, pg.Status, lite.Status, "%q: PostgreSQL %s, SQLite %s", body, pg.Body, lite.Body)
	require.Equal(t, pg.Problem.Code, lite.Problem.Code, "%q: PostgreSQL %s, SQLite %s", body, pg.Body, lite.Body)
	if pg.Status == http.StatusAccepted {
		var req startRequest
		require.Nil(t, decodeJSON(body, &req), "the handler took %q", body)
		sent, err := jsoncheck.Canonical(req.Input)
		require.NoError(t, err)
		var tasks []*store.Task
		for i, st := range stores {
			var res startResponse
			require.NoError(t, json.Unmarshal(answers[i].Body, &res))
			task, err := st.Store.TaskGet(t.Context(), &store.TaskGetParams{Namespace: ns, ID: res.ID})
			require.NoError(t, err, st.Name)
			back, err := jsoncheck.Canonical(task.Input)
			require.NoError(t, err, "%s gave back %q", st.Name, task.Input)
			require.Equal(t, string(sent), string(back), "%s: the input read back", st.Name)
			require.Equal(t, req.IdempotencyKey, task.IdempotencyKey, "%s: the key, byte for byte", st.Name)
			tasks = append(tasks, task)
		}
		a, b := tasks[0], tasks[1]
		require.Equal(t, []any{a.Type, a.Queue, a.Priority, a.MaxAttempts, a.IdempotencyKey, a.TraceID, a.FairnessKey, a.FairnessWeight, a.Labels},
			[]any{b.Type, b.Queue, b.Priority, b.MaxAttempts, b.IdempotencyKey, b.TraceID, b.FairnessKey, b.FairnessWeight, b.Labels})
	}

	// A listing by type, the fuzzer's string as the parameter.
	target := "/v1/tasks?" + url.Values{"namespace": {ns}, "type": {traceparent}}.Encode()
	for i, st := range stores {
		answers[i] = servertest.Send(t, handlers[i], http.MethodGet, target, nil)
		require.Less(t, answers[i].Status, 500, "%s answered %s with %s", st.Name, target, answers[i].Body)
	}
	require.Equal(t, answers[0].Status, answers[1].Status, "%s: PostgreSQL %s, SQLite %s", target, answers[0].Body, answers[1].Body)
	if answers[0].Status == http.StatusOK {
		var pgList, liteList listResponse
		require.NoError(t, json.Unmarshal(answers[0].Body, &pgList))
		require.NoError(t, json.Unmarshal(answers[1].Body, &liteList))
		require.Len(t, liteList.Tasks, len(pgList.Tasks), target)
	}
}

// requireProblem checks p is a complete problem of status and that it is
// written as problem+json.
func requireProblem(t *testing.T, p *Problem, status int) {
	t.Helper()
	require.Equal(t, status, p.Status, "%+v", p)
	require.NotEmpty(t, p.Code)
	title := web.NewProblem(status, p.Code, "").Title
	require.NotEmpty(t, title, "a known code: %s", p.Code)
	require.Equal(t, title, p.Title)
	require.Equal(t, "urn:cairn:problem:"+p.Code, p.Type)
	require.NotEmpty(t, p.Detail)

	w := httptest.NewRecorder()
	(&Server{}).writeProblem(w, httptest.NewRequest(http.MethodPost, "/v1/tasks", nil), p)
	require.Equal(t, status, w.Code)
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	var back Problem
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &back), "%s", w.Body.Bytes())
	require.Equal(t, p.Code, back.Code)
	require.Equal(t, status, back.Status)
}
