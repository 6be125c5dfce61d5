package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// BuiltEvent is one event of a hand-built history, Ago seconds before the
// insert.
type BuiltEvent struct {
	Type    string
	Ago     float64 // seconds
	Attempt int
	Data    string // JSON fields after "v"
}

// JSON is the event's payload as stored.
func (e BuiltEvent) JSON() string {
	if e.Data == "" {
		return `{"v":1}`
	}
	return `{"v":1,` + e.Data + `}`
}

// BuiltTask is a task of a hand-built history: a projection row and its
// events, with times relative to the insert (RunAgo negative: in the
// future). A task with an Owner holds a lease 30s from the insert, of
// epoch Attempt. The projection is not meant to match a replay: a
// diagnosis reads events and a few columns.
type BuiltTask struct {
	Queue, Type, Status string
	RunAgo              float64
	Attempt             int
	Owner, Key          string
	Events              []BuiltEvent
}

func started(ago float64, attempt int, worker string) BuiltEvent {
	return BuiltEvent{"attempt_started", ago, attempt, fmt.Sprintf(`"worker_id":%q,"lease_epoch":%d`, worker, attempt)}
}

func scheduled(ago float64) BuiltEvent { return BuiltEvent{Type: "task_scheduled", Ago: ago} }

// DiagnoseHandBuiltHistory checks a diagnosis of the queue "docs" over a
// history built by hand, with a window of 20s: "then" is 20s to 10s ago,
// "now" the last 10s. insert writes the tasks straight into s's tables, in
// one transaction, with times relative to its now (see BuiltTask).
func DiagnoseHandBuiltHistory(t *testing.T, s store.Store, insert func([]BuiltTask)) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: "default", Name: "docs", Concurrency: 4}))
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: "default", TaskType: "ocr", MaxStarts: 10, Per: time.Second}))
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: "default", TaskType: "unrelated", MaxStarts: 1, Per: time.Second}))
	timeout := `"error":{"class":"transient","kind":"timeout","status":504,"step":"read","message":"ocr timed out"},"next_run_at":"2030-01-01T00:00:00Z"`
	insert([]BuiltTask{
		// Completed then: one attempt of 500ms with a step of 200ms.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "completed", RunAgo: 18, Attempt: 1, Events: []BuiltEvent{
			scheduled(18), started(17.5, 1, "w1"), {"step_completed", 17.3, 1, `"position":0,"name":"read"`},
			{"task_completed", 17.0, 1, ""}}},
		// Failed (100ms) then, retried then, completed now after 6s.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "completed", RunAgo: 15, Attempt: 2, Events: []BuiltEvent{
			scheduled(15), started(15, 1, "w2"), {"attempt_failed", 14.9, 1, timeout},
			started(12, 2, "w1"), {"step_completed", 6, 2, `"position":0,"name":"read"`}, {"task_completed", 6, 2, ""}}},
		// A durable sleep: the second attempt is no retry.
		BuiltTask{Queue: "docs", Type: "remind", Status: "completed", RunAgo: 18, Attempt: 2, Events: []BuiltEvent{
			scheduled(18), started(18, 1, "w1"), {"timer_started", 17.9, 1, `"position":0,"fire_at":"2030-01-01T00:00:00Z"`},
			started(4, 2, "w1"), {"task_completed", 3.9, 2, ""}}},
		// Dead-lettered now: attempt_failed and task_dead_lettered end one attempt.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "dead_lettered", RunAgo: 9.5, Attempt: 1, Events: []BuiltEvent{
			scheduled(9.5), started(9, 1, "w3"),
			{"attempt_failed", 8.5, 1, `"error":{"class":"permanent","kind":"bad_document","message":"not a PDF"}`},
			{"task_dead_lettered", 8.5, 1, `"reason":"permanent error"`}}},
		// Waiting: two due, one not yet due.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "pending", RunAgo: 8, Key: "tenant-a", Events: []BuiltEvent{scheduled(8)}},
		BuiltTask{Queue: "docs", Type: "ocr", Status: "pending", RunAgo: 5, Key: "tenant-a", Events: []BuiltEvent{scheduled(5)}},
		BuiltTask{Queue: "docs", Type: "mail", Status: "pending", RunAgo: -60, Key: "tenant-b", Events: []BuiltEvent{scheduled(2)}},
		// Running, by w3.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "running", RunAgo: 9, Attempt: 1, Owner: "w3", Events: []BuiltEvent{
			scheduled(9), started(1, 1, "w3")}},
		// Out of the window, and out of the queue: not counted.
		BuiltTask{Queue: "docs", Type: "ocr", Status: "completed", RunAgo: 100, Attempt: 1, Events: []BuiltEvent{
			scheduled(100), started(100, 1, "w9"), {"task_completed", 99, 1, ""}}},
		BuiltTask{Queue: "other", Type: "ocr", Status: "completed", RunAgo: 5, Attempt: 1, Events: []BuiltEvent{
			scheduled(5), started(5, 1, "w8"), {"task_completed", 4, 1, ""}}},
	})

	d, err := diagnosis.Diagnose(ctx, s, &store.QueueDiagnoseParams{Namespace: "default", Queue: "docs", Window: 20 * time.Second})
	require.NoError(t, err)
	require.Equal(t, store.Millis(20000), d.Window)
	require.Equal(t, 10*time.Second, d.Now.To.Sub(d.Now.From))
	require.Equal(t, d.Then.To, d.Now.From)

	then := d.Then
	require.Equal(t, []int{3, 1, 1, 4, 1, 1, 0}, []int{then.Inflow, then.Outflow, then.Completed, then.AttemptsStarted,
		then.Retries, then.AttemptsFailed, then.LeasesExpired}, "inflow, outflow, completed, started, retries, failed, expired then")
	require.Equal(t, []string{"w1", "w2"}, then.WorkerIDs)
	require.Equal(t, 2, then.Workers)
	require.InDelta(t, 0.25, then.RetryShare, 1e-9)
	requireDurations(t, store.DurationStats{Count: 3, Mean: 700.0 / 3, P50: 100, P95: 460}, then.Attempts, "attempts then: 500, 100, 100 ms")
	require.Len(t, then.Types, 2)
	ocr := then.Types[0]
	require.Equal(t, "ocr", ocr.Type)
	require.Equal(t, []int{2, 1, 3, 1, 1}, []int{ocr.Inflow, ocr.Outflow, ocr.AttemptsStarted, ocr.Retries, ocr.AttemptsFailed})
	requireDurations(t, store.DurationStats{Count: 2, Mean: 300, P50: 300, P95: 480}, ocr.Attempts, "ocr attempts then")
	require.Equal(t, "remind", then.Types[1].Type)
	require.Len(t, then.Steps, 1)
	require.Equal(t, "read", then.Steps[0].Step)
	requireDurations(t, store.DurationStats{Count: 1, Mean: 200, P50: 200, P95: 200}, then.Steps[0].Duration, "step read then")
	require.Equal(t, []store.ErrorStats{{Type: "ocr", Class: "transient", Kind: "timeout", Status: 504, Step: "read", Count: 1,
		Message: "ocr timed out"}}, then.Errors)

	now := d.Now
	require.Equal(t, []int{5, 3, 2, 3, 0, 1, 0}, []int{now.Inflow, now.Outflow, now.Completed, now.AttemptsStarted,
		now.Retries, now.AttemptsFailed, now.LeasesExpired}, "inflow, outflow, completed, started, retries, failed, expired now")
	require.Equal(t, []string{"w1", "w3"}, now.WorkerIDs)
	requireDurations(t, store.DurationStats{Count: 3, Mean: 6600.0 / 3, P50: 500, P95: 5450}, now.Attempts, "attempts now: 6000, 100, 500 ms")
	require.Len(t, now.Steps, 1)
	requireDurations(t, store.DurationStats{Count: 1, Mean: 6000, P50: 6000, P95: 6000}, now.Steps[0].Duration,
		"step read now: from its attempt's start")
	require.Equal(t, []store.ErrorStats{{Type: "ocr", Class: "permanent", Kind: "bad_document", Count: 1, Message: "not a PDF"}}, now.Errors)

	require.Equal(t, store.QueueDepth{Pending: 3, Running: 1, Due: 2, OldestWait: d.Depth.OldestWait,
		SinceLastStart: d.Depth.SinceLastStart}, d.Depth)
	require.InDelta(t, 8000, float64(d.Depth.OldestWait), 1000, "the oldest due task was due 8s before the diagnosis")
	require.InDelta(t, 1000, float64(d.Depth.SinceLastStart), 1000, "the last attempt started 1s before the diagnosis")
	require.Equal(t, store.QueueLimits{Concurrency: 4, RateLimits: []store.RateLimit{{Type: "ocr", MaxStarts: 10, Per: 1000}}}, d.Limits)
	require.Len(t, d.WaitingByType, 2)
	require.Equal(t, []any{"ocr", 2, 2, true}, []any{d.WaitingByType[0].Type, d.WaitingByType[0].Waiting, d.WaitingByType[0].Due, d.WaitingByType[0].Served})
	require.Equal(t, []any{"mail", 1, 0, false}, []any{d.WaitingByType[1].Type, d.WaitingByType[1].Waiting, d.WaitingByType[1].Due, d.WaitingByType[1].Served})
	require.InDelta(t, 2.0/3, d.WaitingByType[0].Share, 1e-9)
	require.Equal(t, []store.WaitingKey{{Key: "tenant-a", Waiting: 2, Share: 2.0 / 3}, {Key: "tenant-b", Waiting: 1, Share: 1.0 / 3}}, d.WaitingByKey)
	require.Equal(t, 2, d.FairnessKeys)

	// A due task has waited 8s of a 20s window, but nothing explains it.
	require.Empty(t, d.Causes)
	require.False(t, d.Healthy)
	require.Contains(t, d.Summary, "backing up")
}

func requireDurations(t *testing.T, want, got store.DurationStats, what string) {
	t.Helper()
	require.Equal(t, want.Count, got.Count, what)
	for _, v := range [][2]store.Millis{{want.Mean, got.Mean}, {want.P50, got.P50}, {want.P95, got.P95}} {
		require.InDelta(t, float64(v[0]), float64(v[1]), 0.01, "%s: want %+v, got %+v", what, want, got)
	}
}
