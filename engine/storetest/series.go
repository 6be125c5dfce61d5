package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

var seriesTests = []conformanceTest{
	{"QueueSeriesFoldsTheStoresOwnWrites", testQueueSeries},
	{"QueueSeriesRefusesBadParams", testQueueSeriesRefusals},
}

// seriesOf returns the series of queue among all, failing without it.
func seriesOf(t *testing.T, all []store.QueueSeries, queue string) store.QueueSeries {
	t.Helper()
	for _, q := range all {
		if q.Queue == queue {
			return q
		}
	}
	t.Fatalf("no series of queue %q in %d", queue, len(all))
	return store.QueueSeries{}
}

// testQueueSeries: through the store's own writes, all within the last of
// sixty one-minute buckets: its gauges are the queue's load now (what
// QueueStatsList says), its flows what happened; every earlier bucket is
// empty, since nothing existed yet.
func testQueueSeries(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for range 5 {
		start(t, s, spec{})
	}
	start(t, s, spec{RunAt: plan.Now(nil).Add(time.Hour)})
	start(t, s, spec{Queue: "other"})
	complete(t, s, claimOne(t, s, "w1", time.Minute))
	retried := claimOne(t, s, "w2", time.Minute)
	_, err := appendFenced(t, s, retried, history.AttemptFailedData{
		Error:     history.ErrorInfo{Class: history.Transient, Message: "try later"},
		NextRunAt: ptrTime(plan.Now(nil).Add(time.Hour)),
	})
	require.NoError(t, err)
	dead := claimOne(t, s, "w3", time.Minute)
	_, err = appendFenced(t, s, dead, history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Permanent, Message: "no"}},
		history.TaskDeadLetteredData{Reason: "permanent", Error: history.ErrorInfo{Class: history.Permanent, Message: "no"}})
	require.NoError(t, err)
	claimOne(t, s, "w4", time.Minute)

	all, err := s.QueueSeries(ctx, &store.QueueSeriesParams{Namespace: store.DefaultNamespace, Window: time.Hour})
	require.NoError(t, err)
	require.Len(t, all, 2, "the default queue and the other")
	q := seriesOf(t, all, defaultQueue)
	require.Len(t, q.Points, store.DefaultSeriesBuckets)
	require.Equal(t, time.Minute, q.Step)
	last := q.Points[len(q.Points)-1]
	require.WithinDuration(t, plan.Now(nil), last.End, time.Minute, "the last bucket ends now")
	require.Equal(t, q.From.Add(time.Hour), last.End)
	stats, err := s.QueueStatsList(ctx, &store.QueueStatsListParams{Namespace: store.DefaultNamespace, Window: time.Hour})
	require.NoError(t, err)
	for _, st := range stats {
		if st.Queue == defaultQueue {
			require.Equal(t, []int{st.Waiting, st.Due, st.Running}, []int{last.Waiting, last.Due, last.Running},
				"the last bucket's gauges are the queue's load now")
		}
	}
	require.Equal(t, []int{3, 1, 1}, []int{last.Waiting, last.Due, last.Running}, "waiting (one due, the later task, the retry), due, running")
	require.Equal(t, []int{1, 1, 4, 3, 2}, []int{last.Completed, last.Failed, last.Started, last.AttemptsEnded, last.AttemptsFailed},
		"completed, failed, started, attempts ended, attempts failed")
	require.Positive(t, last.LatencyMax, "each attempt waited from its run time to its start")
	require.GreaterOrEqual(t, last.LatencyTotal, last.LatencyMax)
	require.InDelta(t, 2.0/3, last.ErrorRate(), 1e-9)
	for _, p := range q.Points[:len(q.Points)-1] {
		require.Equal(t, store.SeriesPoint{End: p.End}, p, "nothing existed before the last minute")
	}
	require.Equal(t, 1, seriesOf(t, all, "other").Points[store.DefaultSeriesBuckets-1].Waiting)

	one, err := s.QueueSeries(ctx, &store.QueueSeriesParams{Namespace: store.DefaultNamespace, Queue: "other", Window: 10 * time.Minute, Buckets: 5})
	require.NoError(t, err)
	require.Len(t, one, 1, "one queue asked for")
	require.Len(t, one[0].Points, 5)
	require.Equal(t, 2*time.Minute, one[0].Step)

	none, err := s.QueueSeries(ctx, &store.QueueSeriesParams{Namespace: "elsewhere", Window: time.Hour})
	require.NoError(t, err)
	require.Empty(t, none, "a namespace without tasks has no series")
}

func testQueueSeriesRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for p, want := range map[*store.QueueSeriesParams]string{
		nil:                 "namespace is required",
		{Window: time.Hour}: "namespace is required",
		{Namespace: "default", Window: time.Second}:                   "window 1s must be between 1m0s and 168h0m0s",
		{Namespace: "default", Window: 8 * 24 * time.Hour}:            "window 192h0m0s must be between",
		{Namespace: "default", Window: time.Hour, Buckets: -1}:        "-1 buckets; ask for 1 to 360",
		{Namespace: "default", Window: time.Hour, Buckets: 361}:       "361 buckets",
		{Namespace: "default", Window: 2 * time.Minute, Buckets: 360}: "shorter than a second",
	} {
		_, err := s.QueueSeries(ctx, p)
		require.ErrorContains(t, err, want, "%+v", p)
	}
}

// SeriesHandBuiltHistory checks the series of queue "docs" over an hour
// in six ten-minute buckets, over a history built by hand: tasks that
// stood still through the window (waiting, delayed into it, running),
// one that entered it running and was released, retried and completed,
// one that failed into the dead letters, and one running now. insert
// writes the tasks straight into s's tables as for
// [DiagnoseHandBuiltHistory]; each row's updated_at must be its last
// event's time, as in a real projection. Every event is minutes from a
// bucket's edge, so the test does not depend on how fast it runs.
func SeriesHandBuiltHistory(t *testing.T, s store.Store, insert func([]BuiltTask)) {
	t.Helper()
	insert([]BuiltTask{
		{Queue: "docs", Type: "ocr", Status: "pending", RunAgo: 7200, Events: []BuiltEvent{scheduled(7200)}},
		{Queue: "docs", Type: "ocr", Status: "pending", RunAgo: 1500, Events: []BuiltEvent{scheduled(7100)}},
		{Queue: "docs", Type: "ocr", Status: "running", Attempt: 1, Owner: "w-old",
			Events: []BuiltEvent{scheduled(7300), started(7200, 1, "w-old")}},
		{Queue: "docs", Type: "ocr", Status: "completed", Attempt: 2, Events: []BuiltEvent{
			scheduled(5000), started(4000, 1, "w1"),
			{Type: "task_released", Ago: 2700, Attempt: 1, Data: `"worker_id":"w1","lease_epoch":1,"reason":"shutdown"`},
			started(1500, 2, "w2"), {Type: "task_completed", Ago: 1300, Attempt: 2},
		}},
		{Queue: "docs", Type: "ocr", Status: "dead_lettered", Attempt: 1, Events: []BuiltEvent{
			scheduled(1000), started(900, 1, "w3"),
			{Type: "attempt_failed", Ago: 800, Attempt: 1, Data: `"error":{"class":"permanent","message":"bad scan"}`},
			{Type: "task_dead_lettered", Ago: 800, Attempt: 1, Data: `"reason":"permanent","error":{"class":"permanent","message":"bad scan"}`},
		}},
		{Queue: "docs", Type: "ocr", Status: "running", Attempt: 1, Owner: "w4", Events: []BuiltEvent{scheduled(300), started(200, 1, "w4")}},
		{Queue: "elsewhere", Type: "ocr", Status: "pending", RunAgo: 60, Events: []BuiltEvent{scheduled(60)}},
	})
	all, err := s.QueueSeries(context.Background(), &store.QueueSeriesParams{Namespace: "default", Queue: "docs", Window: time.Hour, Buckets: 6})
	require.NoError(t, err)
	require.Len(t, all, 1)
	q := all[0]
	require.Equal(t, 10*time.Minute, q.Step)
	type gauges struct{ Waiting, Due, Running int }
	type flows struct{ Completed, Failed, Started, Ended, AttemptsFailed int }
	wantGauges := []gauges{{2, 1, 2}, {3, 2, 1}, {3, 2, 1}, {2, 2, 1}, {2, 2, 1}, {2, 2, 2}}
	wantFlows := []flows{{}, {Ended: 1}, {}, {Completed: 1, Started: 1, Ended: 1}, {Failed: 1, Started: 1, Ended: 1, AttemptsFailed: 1}, {Started: 1}}
	wantLatency := []time.Duration{0, 0, 0, 1200 * time.Second, 100 * time.Second, 100 * time.Second}
	for i, p := range q.Points {
		require.Equal(t, wantGauges[i], gauges{p.Waiting, p.Due, p.Running}, "gauges at the end of bucket %d", i)
		require.Equal(t, wantFlows[i], flows{p.Completed, p.Failed, p.Started, p.AttemptsEnded, p.AttemptsFailed}, "flows of bucket %d", i)
		require.Equal(t, wantLatency[i], p.LatencyMax, "latency of bucket %d", i)
		require.Equal(t, wantLatency[i], p.MeanLatency(), "mean latency of bucket %d", i)
	}
}
