package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

var nextRun = historytest.Base.Add(time.Minute)

// The wire format, field by field: "v" first, then the payload's fields in
// declaration order, omitempty fields left out. Changing any of these strings
// is a schema change and needs a new SchemaVersion.
func TestEncode(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		payload history.Payload
		want    string
	}{
		{
			name: "task_scheduled",
			payload: history.TaskScheduledData{
				Namespace: "default", TaskType: "send_invoice", TypeVersion: 2, Queue: "critical", Priority: -1,
				Input: json.RawMessage(`{"invoice":42}`), RunAt: historytest.Base, IdempotencyKey: "order-7",
				TraceID: "abc", Labels: map[string]string{"b": "2", "a": "1"}, MaxAttempts: 5,
			},
			want: `{"v":1,"namespace":"default","task_type":"send_invoice","type_version":2,"queue":"critical","priority":-1,` +
				`"input":{"invoice":42},"run_at":"2026-01-02T03:04:05.123456Z","idempotency_key":"order-7","trace_id":"abc",` +
				`"labels":{"a":"1","b":"2"},"max_attempts":5}`,
		},
		{
			name:    "task_scheduled minimal",
			payload: history.TaskScheduledData{TaskType: "t", RunAt: historytest.Base},
			want:    `{"v":1,"namespace":"","task_type":"t","type_version":0,"queue":"","priority":0,"run_at":"2026-01-02T03:04:05.123456Z","max_attempts":0}`,
		},
		{
			name:    "attempt_started",
			payload: history.AttemptStartedData{WorkerID: "w", LeaseEpoch: 3, LeaseExpiresAt: historytest.Base},
			want:    `{"v":1,"worker_id":"w","lease_epoch":3,"lease_expires_at":"2026-01-02T03:04:05.123456Z"}`,
		},
		{
			name:    "step_completed",
			payload: history.StepCompletedData{Position: 2, Name: "ship", Output: json.RawMessage(`[1,2]`)},
			want:    `{"v":1,"position":2,"name":"ship","output":[1,2]}`,
		},
		{
			name:    "step_completed without output",
			payload: history.StepCompletedData{Name: "reserve"},
			want:    `{"v":1,"position":0,"name":"reserve"}`,
		},
		{
			name: "attempt_failed with retry",
			payload: history.AttemptFailedData{
				Error: history.ErrorInfo{
					Class: history.Transient, Message: `503 "busy"`, Kind: "http", Status: 503,
					Attrs: map[string]string{"host": "x"}, Step: "charge", Position: 1, RetryAfterMillis: 1500,
				},
				NextRunAt: &nextRun,
			},
			want: `{"v":1,"error":{"class":"transient","message":"503 \"busy\"","kind":"http","status":503,"attrs":{"host":"x"},` +
				`"step":"charge","position":1,"retry_after_ms":1500},"next_run_at":"2026-01-02T03:05:05.123456Z"}`,
		},
		{
			name:    "attempt_failed final",
			payload: history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Permanent, Message: "no"}},
			want:    `{"v":1,"error":{"class":"permanent","message":"no"}}`,
		},
		{
			name:    "lease_expired",
			payload: history.LeaseExpiredData{WorkerID: "w", LeaseEpoch: 4, NextRunAt: historytest.Base},
			want:    `{"v":1,"worker_id":"w","lease_epoch":4,"next_run_at":"2026-01-02T03:04:05.123456Z"}`,
		},
		{
			name:    "task_released",
			payload: history.TaskReleasedData{WorkerID: "w", LeaseEpoch: 4, Reason: "shutdown"},
			want:    `{"v":1,"worker_id":"w","lease_epoch":4,"reason":"shutdown"}`,
		},
		{
			name:    "task_completed without output",
			payload: history.TaskCompletedData{},
			want:    `{"v":1}`,
		},
		{
			name:    "task_completed",
			payload: history.TaskCompletedData{Output: json.RawMessage(`"done"`)},
			want:    `{"v":1,"output":"done"}`,
		},
		{
			name:    "task_failed",
			payload: history.TaskFailedData{Error: history.ErrorInfo{Class: history.Permanent, Message: "bad <input> & more"}},
			want:    `{"v":1,"error":{"class":"permanent","message":"bad \u003cinput\u003e \u0026 more"}}`,
		},
		{
			name:    "task_dead_lettered",
			payload: history.TaskDeadLetteredData{Reason: "exhausted", Error: history.ErrorInfo{Class: history.Transient, Message: "x"}},
			want:    `{"v":1,"reason":"exhausted","error":{"class":"transient","message":"x"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := history.Encode(tt.payload)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))

			decoded, err := history.Decode(tt.payload.EventType(), got)
			require.NoError(t, err)
			require.Equal(t, tt.payload, decoded)
		})
	}
}

func TestEncodePointer(t *testing.T) {
	t.Parallel()

	p := history.StepCompletedData{Position: 1, Name: "charge"}
	byValue, err := history.Encode(p)
	require.NoError(t, err)
	byPointer, err := history.Encode(&p)
	require.NoError(t, err)
	require.Equal(t, string(byValue), string(byPointer))

	decoded, err := history.Decode(history.StepCompleted, byPointer)
	require.NoError(t, err)
	require.Equal(t, p, decoded, "decode always returns values")
}

func TestEncodeErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		payload history.Payload
	}{
		{name: "nil", payload: nil},
		{name: "nil pointer", payload: (*history.TaskScheduledData)(nil)},
		{name: "nil pointer without fields", payload: (*history.TaskCompletedData)(nil)},
		{name: "invalid raw input", payload: history.TaskScheduledData{TaskType: "t", Input: json.RawMessage(`{`)}},
		{name: "invalid raw output", payload: history.StepCompletedData{Name: "s", Output: json.RawMessage(`nope`)}},
		{name: "year out of range", payload: history.LeaseExpiredData{NextRunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{name: "not an object", payload: stringPayload("x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var (
				got []byte
				err error
			)
			require.NotPanics(t, func() { got, err = history.Encode(tt.payload) })
			require.Error(t, err, "encoded as %s", got)
			require.Nil(t, got)
		})
	}
}

// stringPayload is a foreign Payload whose JSON is not an object.
type stringPayload string

func (stringPayload) EventType() history.Type { return history.TaskCompleted }

func TestDecodeInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		typ      history.Type
		data     string
		contains string
	}{
		{name: "unknown type", typ: "task_exploded", data: `{"v":1}`, contains: `unknown event type "task_exploded"`},
		{name: "empty type", typ: "", data: `{"v":1}`, contains: `unknown event type ""`},
		{name: "type with different case", typ: "TASK_COMPLETED", data: `{"v":1}`, contains: "unknown event type"},
		{name: "no version", typ: history.TaskCompleted, data: `{"output":1}`, contains: "no schema version"},
		{name: "null version", typ: history.TaskCompleted, data: `{"v":null}`, contains: "no schema version"},
		{name: "version 0", typ: history.TaskCompleted, data: `{"v":0}`, contains: "unknown schema version 0"},
		{name: "version 2", typ: history.StepCompleted, data: `{"v":2,"position":0,"name":"a"}`, contains: "unknown schema version 2"},
		{name: "negative version", typ: history.TaskCompleted, data: `{"v":-1}`, contains: "unknown schema version -1"},
		{name: "string version", typ: history.TaskCompleted, data: `{"v":"1"}`, contains: "decode task_completed payload"},
		{name: "fractional version", typ: history.TaskCompleted, data: `{"v":1.5}`, contains: "decode task_completed payload"},
		{name: "empty", typ: history.TaskCompleted, data: ``, contains: "decode task_completed payload"},
		{name: "null", typ: history.TaskCompleted, data: `null`, contains: "no schema version"},
		{name: "array", typ: history.TaskCompleted, data: `[{"v":1}]`, contains: "decode task_completed payload"},
		{name: "string", typ: history.TaskCompleted, data: `"v"`, contains: "decode task_completed payload"},
		{name: "not JSON", typ: history.TaskCompleted, data: `{v:1}`, contains: "decode task_completed payload"},
		{name: "truncated", typ: history.StepCompleted, data: `{"v":1,"name":"a"`, contains: "decode step_completed payload"},
		{name: "trailing data", typ: history.TaskCompleted, data: `{"v":1} {"v":1}`, contains: "decode task_completed payload"},
		{name: "trailing garbage", typ: history.TaskCompleted, data: `{"v":1}x`, contains: "decode task_completed payload"},
		{name: "wrong field type", typ: history.StepCompleted, data: `{"v":1,"position":"first","name":"a"}`, contains: "decode step_completed payload"},
		{name: "bad time", typ: history.LeaseExpired, data: `{"v":1,"next_run_at":"yesterday"}`, contains: "decode lease_expired payload"},
		{name: "bad next_run_at", typ: history.AttemptFailed, data: `{"v":1,"error":{},"next_run_at":5}`, contains: "decode attempt_failed payload"},
		{name: "integer overflow", typ: history.AttemptStarted, data: `{"v":1,"lease_epoch":9223372036854775808}`, contains: "decode attempt_started payload"},
		{name: "labels not strings", typ: history.TaskScheduled, data: `{"v":1,"labels":{"a":1}}`, contains: "decode task_scheduled payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var (
				p   history.Payload
				err error
			)
			require.NotPanics(t, func() { p, err = history.Decode(tt.typ, []byte(tt.data)) })
			require.Error(t, err)
			require.Nil(t, p)
			require.True(t, errors.Is(err, history.ErrInvalidHistory), "not marked ErrInvalidHistory: %+v", err)
			require.Contains(t, err.Error(), tt.contains)
		})
	}
}

// Inputs Decode accepts though Encode never writes them: whitespace, key
// order, and JSON's case-insensitive field names.
func TestDecodeLenient(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		typ  history.Type
		data string
		want history.Payload
	}{
		{name: "whitespace", typ: history.StepCompleted, data: " {\n \"v\" : 1 , \"name\" : \"a\" }\n", want: history.StepCompletedData{Name: "a"}},
		{name: "version last", typ: history.StepCompleted, data: `{"position":1,"name":"a","v":1}`, want: history.StepCompletedData{Position: 1, Name: "a"}},
		{name: "no fields", typ: history.TaskCompleted, data: `{"v":1}`, want: history.TaskCompletedData{}},
		{name: "null field", typ: history.AttemptFailed, data: `{"v":1,"next_run_at":null}`, want: history.AttemptFailedData{}},
		{name: "upper-case keys", typ: history.TaskReleased, data: `{"V":1,"WORKER_ID":"w"}`, want: history.TaskReleasedData{WorkerID: "w"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			p, err := history.Decode(tt.typ, []byte(tt.data))
			require.NoError(t, err)
			require.Equal(t, tt.want, p)
		})
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := history.Event{Seq: 3, At: at, Attempt: 2, Data: history.StepCompletedData{Position: 1, Name: "ocr", Output: json.RawMessage(`"text"`)}}
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, `{"seq":3,"type":"step_completed","at":"2026-11-29T12:00:00Z","attempt":2,
		"data":{"v":1,"position":1,"name":"ocr","output":"text"}}`, string(b))
	var back history.Event
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, e, back)
	require.True(t, errors.Is(json.Unmarshal([]byte(`{"seq":1,"type":"nope","data":{"v":1}}`), &back), history.ErrInvalidHistory))
	_, err = json.Marshal(history.Event{Seq: 1})
	require.ErrorContains(t, err, "no payload")
}
