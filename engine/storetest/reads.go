package storetest

import (
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

var readTests = []conformanceTest{
	{"EventScanPagesInOrderWithFilters", testEventScan},
	{"EventScanRefusesBadParams", testEventScanRefusals},
	{"QueueStatsCountWaitingRunningAndFinished", testQueueStats},
	{"QueueGaugesCountByStatus", testQueueGauges},
}

// testEventScan: the audit scan returns a namespace's events in (at, task,
// seq) order, page by page through the cursor, filtered by event type,
// task type and time, with each event's task.
func testEventScan(t *testing.T, s engine.Store) {
	ctx := testContext(t)
	since := engine.Now().Add(-time.Second)
	start(t, s, spec{Type: "other"})
	start(t, s, spec{Namespace: "elsewhere"})
	for range 3 {
		start(t, s, spec{Labels: map[string]string{"tenant": "a"}})
	}
	for range 3 {
		complete(t, s, claimOne(t, s, "w", time.Minute))
	}
	until := engine.Now().Add(time.Second)

	var all []engine.AuditEvent
	var after *engine.EventCursor
	for page := 0; ; page++ {
		require.Less(t, page, 20, "the scan ends")
		got, err := s.EventScan(ctx, &engine.EventScanParams{Namespace: engine.DefaultNamespace, Since: since, Until: until,
			After: after, Limit: 4})
		require.NoError(t, err)
		all = append(all, got...)
		if len(got) < 4 {
			break
		}
		c := got[len(got)-1].Cursor()
		after = &c
	}
	// 4 task_scheduled, and for the 3 completed: attempt_started,
	// task_completed (the claimed ones may be any 3 of the 4 of this
	// namespace's queue).
	require.Len(t, all, 4+3*2)
	for i, e := range all {
		require.Equal(t, engine.DefaultNamespace, e.Namespace)
		require.NotEmpty(t, e.Data)
		if i > 0 {
			prev := all[i-1]
			ordered := prev.Event.At.Before(e.Event.At) || (prev.Event.At.Equal(e.Event.At) &&
				(prev.TaskID.String() < e.TaskID.String() || (prev.TaskID == e.TaskID && prev.Event.Seq < e.Event.Seq)))
			require.True(t, ordered, "event %d after event %d in (at, task, seq) order", i, i-1)
		}
	}

	done, err := s.EventScan(ctx, &engine.EventScanParams{Namespace: engine.DefaultNamespace, Since: since, Until: until,
		EventTypes: []history.Type{history.TaskCompleted}})
	require.NoError(t, err)
	require.Len(t, done, 3)
	for _, e := range done {
		require.Equal(t, history.TaskCompleted, e.Event.Type())
		require.Equal(t, history.StatusCompleted, e.Status)
	}
	labelled, err := s.EventScan(ctx, &engine.EventScanParams{Namespace: engine.DefaultNamespace, Since: since, Until: until,
		TaskType: defaultType, EventTypes: []history.Type{history.TaskScheduled}})
	require.NoError(t, err)
	require.Len(t, labelled, 3)
	for _, e := range labelled {
		require.Equal(t, map[string]string{"tenant": "a"}, e.Labels)
		require.Equal(t, defaultType, e.TaskType)
	}
	none, err := s.EventScan(ctx, &engine.EventScanParams{Namespace: engine.DefaultNamespace, Since: until, Until: until.Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, none, "nothing after the range")
}

func testEventScanRefusals(t *testing.T, s engine.Store) {
	ctx := testContext(t)
	for name, p := range map[string]*engine.EventScanParams{
		"no namespace": {Until: engine.Now()},
		"no until":     {Namespace: engine.DefaultNamespace},
		"limit":        {Namespace: engine.DefaultNamespace, Until: engine.Now(), Limit: engine.MaxEventScanLimit + 1},
	} {
		_, err := s.EventScan(ctx, p)
		require.Error(t, err, name)
	}
}

// testQueueStats: per queue, the waiting, due and running tasks now, and
// what finished in the window.
func testQueueStats(t *testing.T, s engine.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, engine.QueueConfig{Namespace: engine.DefaultNamespace, Name: "idle", MaxWaiting: 5}))
	for range 4 {
		start(t, s, spec{})
	}
	start(t, s, spec{RunAt: engine.Now().Add(time.Hour)})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	claimOne(t, s, "w", time.Minute)

	stats, err := s.QueueStatsList(ctx, engine.DefaultNamespace, time.Hour)
	require.NoError(t, err)
	byQueue := map[string]engine.QueueStats{}
	for _, q := range stats {
		byQueue[q.Queue] = q
	}
	q := byQueue[defaultQueue]
	require.Equal(t, 3, q.Waiting, "two due and one later")
	require.Equal(t, 2, q.Due)
	require.Equal(t, 1, q.Running)
	require.Equal(t, 1, q.Completed)
	require.Positive(t, q.OldestDueAge)
	idle, ok := byQueue["idle"]
	require.True(t, ok, "a queue with settings is listed")
	require.Equal(t, 5, idle.MaxWaiting)
	require.Zero(t, idle.Waiting)
}

// testQueueGauges: the gauges count unfinished tasks and dead letters per
// namespace, queue and status.
func testQueueGauges(t *testing.T, s engine.Store) {
	ctx := testContext(t)
	for range 3 {
		start(t, s, spec{})
	}
	start(t, s, spec{Namespace: "elsewhere"})
	claimOne(t, s, "w", time.Minute)
	gauges, err := s.QueueGaugeList(ctx)
	require.NoError(t, err)
	got := map[string]map[history.Status]int64{}
	for _, g := range gauges {
		got[g.Namespace+"/"+g.Queue] = g.Tasks
	}
	require.Equal(t, int64(2), got[engine.DefaultNamespace+"/"+defaultQueue][history.StatusPending])
	require.Equal(t, int64(1), got[engine.DefaultNamespace+"/"+defaultQueue][history.StatusRunning])
	require.Equal(t, int64(1), got["elsewhere/"+defaultQueue][history.StatusPending])
}
