package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeStartRequest: a body of POST /v1/tasks goes through decodeBody
// (under a size limit) and decodeJSON into a startRequest, then through
// startOpts with a traceparent header. Nothing panics; every rejection is a
// problem with status 400 or 413 (413 exactly when the body is over the
// limit), a known code, a title and a detail, and it is written as
// problem+json; an accepted request gives start options that say what it
// said.
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
	} {
		f.Add([]byte(seed.body), seed.traceparent, uint16(4096))
		f.Add([]byte(seed.body), seed.traceparent, uint16(len(seed.body)/2))
	}

	f.Fuzz(func(t *testing.T, body []byte, traceparent string, limit uint16) {
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
			require.Nil(t, opts)
			requireProblem(t, p, http.StatusBadRequest)
			return
		}
		require.NotNil(t, opts)
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
	})
}

// requireProblem checks p is a complete problem of status and that it is
// written as problem+json.
func requireProblem(t *testing.T, p *Problem, status int) {
	t.Helper()
	require.Equal(t, status, p.Status, "%+v", p)
	require.NotEmpty(t, p.Code)
	require.Contains(t, titles, p.Code)
	require.Equal(t, titles[p.Code], p.Title)
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
