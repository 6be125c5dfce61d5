package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

var readTests = []conformanceTest{
	{"EventScanPagesInOrderWithFilters", testEventScan},
	{"EventScanRefusesBadParams", testEventScanRefusals},
	{"QueueStatsCountWaitingRunningAndFinished", testQueueStats},
	{"QueueGaugesCountByStatus", testQueueGauges},
	{"QueueWaitListCountsDueTasksByPriority", testQueueWaits},
	{"NamespacedReadsAndWritesRefuseNoNamespace", testNamespaceRequired},
	{"DiagnosisOfAnEmptyQueue", testDiagnoseEmptyQueue},
	{"DiagnosisRefusesBadParams", testDiagnoseRefusals},
	{"DiagnosisCountsWhatHappened", testDiagnoseCounts},
	{"EventPagesAreBoundedInEventsAndBytes", testEventPages},
	{"EventListReadsTheEventsAfterASeqEach", testEventList},
	{"EventListAndTaskGetManyKeepToTheNamespace", testReadsByIDInNamespace},
}

// testEventList: the events of each task after its seq, in order, the
// same as those of the whole log; after 0 is the whole log; a task with
// nothing after its seq, or unknown, has no entry.
func testEventList(t *testing.T, s store.Store) {
	ctx := testContext(t)
	long := start(t, s, spec{})
	other := start(t, s, spec{Type: "other"})
	ct := claimOne(t, s, "w", time.Minute)
	require.Equal(t, long, ct.Task.ID)
	_, err := appendFenced(t, s, ct, history.StepCompletedData{Position: 0, Name: "a", Output: json.RawMessage(`1`)},
		history.StepCompletedData{Position: 1, Name: "b", Output: json.RawMessage(`2`)})
	require.NoError(t, err)
	whole := events(t, s, long)
	require.Len(t, whole, 4)

	got, err := s.EventList(ctx, &store.EventListParams{After: map[uuid.UUID]int64{long: 2, other: 0, uuid.New(): 0}})
	require.NoError(t, err)
	require.Len(t, got, 2, "no entry for the unknown task")
	require.Equal(t, whole[2:], got[long], "the events after seq 2")
	require.Equal(t, events(t, s, other), got[other], "after 0: the whole log")

	got, err = s.EventList(ctx, &store.EventListParams{After: map[uuid.UUID]int64{long: 4, other: 1}})
	require.NoError(t, err)
	require.Empty(t, got, "nothing after the last seqs")
	got, err = s.EventList(ctx, &store.EventListParams{})
	require.NoError(t, err)
	require.Empty(t, got)
}

// testReadsByIDInNamespace: EventList and TaskGetMany with a namespace
// read only the tasks of it (another's are left out as unknown ones are),
// whether they read whole logs or after a seq; without one, the tasks of
// every namespace.
func testReadsByIDInNamespace(t *testing.T, s store.Store) {
	ctx := testContext(t)
	mine := start(t, s, spec{})
	theirs := start(t, s, spec{Namespace: "elsewhere"})
	unknown := uuid.New()
	mineEvents, theirEvents := events(t, s, mine), events(t, s, theirs)
	require.NotEmpty(t, mineEvents)
	require.NotEmpty(t, theirEvents)

	for _, after := range []int64{0, 1} {
		got, err := s.EventList(ctx, &store.EventListParams{Namespace: store.DefaultNamespace,
			After: map[uuid.UUID]int64{mine: 0, theirs: after, unknown: 0}})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID][]history.Event{mine: mineEvents}, got, "only the namespace's task (after %d)", after)
	}
	got, err := s.EventList(ctx, &store.EventListParams{Namespace: "elsewhere", After: map[uuid.UUID]int64{mine: 0}})
	require.NoError(t, err)
	require.Empty(t, got, "a task of another namespace has no entry")
	one, err := store.TaskEvents(ctx, s, "elsewhere", theirs)
	require.NoError(t, err)
	require.Equal(t, theirEvents, one)
	got, err = s.EventList(ctx, store.EventListAll("", mine, theirs, unknown))
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID][]history.Event{mine: mineEvents, theirs: theirEvents}, got, "\"\": every namespace")

	tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{Namespace: store.DefaultNamespace, IDs: []uuid.UUID{mine, theirs, unknown}})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, mine, tasks[0].ID)
	tasks, err = s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []uuid.UUID{mine, theirs, unknown}})
	require.NoError(t, err)
	require.Len(t, tasks, 2, "\"\": every namespace")
	tasks, err = s.TaskGetMany(ctx, &store.TaskGetManyParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Empty(t, tasks)
}

// testEventScan: the audit scan returns a namespace's events in (at, task,
// seq) order, page by page through the cursor, filtered by event type,
// task type and time, with each event's task.
func testEventScan(t *testing.T, s store.Store) {
	ctx := testContext(t)
	since := plan.Now(nil).Add(-time.Second)
	start(t, s, spec{Type: "other"})
	start(t, s, spec{Namespace: "elsewhere"})
	for range 3 {
		start(t, s, spec{Labels: map[string]string{"tenant": "a"}})
	}
	for range 3 {
		complete(t, s, claimOne(t, s, "w", time.Minute))
	}
	until := plan.Now(nil).Add(time.Second)

	var all []store.AuditEvent
	var after *store.EventCursor
	for page := 0; ; page++ {
		require.Less(t, page, 20, "the scan ends")
		got, err := s.EventScan(ctx, &store.EventScanParams{Namespace: store.DefaultNamespace, Since: since, Until: until,
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
		require.Equal(t, store.DefaultNamespace, e.Namespace)
		require.NotEmpty(t, e.Data)
		if i > 0 {
			prev := all[i-1]
			ordered := prev.Event.At.Before(e.Event.At) || (prev.Event.At.Equal(e.Event.At) &&
				(prev.TaskID.String() < e.TaskID.String() || (prev.TaskID == e.TaskID && prev.Event.Seq < e.Event.Seq)))
			require.True(t, ordered, "event %d after event %d in (at, task, seq) order", i, i-1)
		}
	}

	done, err := s.EventScan(ctx, &store.EventScanParams{Namespace: store.DefaultNamespace, Since: since, Until: until,
		EventTypes: []history.Type{history.TaskCompleted}})
	require.NoError(t, err)
	require.Len(t, done, 3)
	for _, e := range done {
		require.Equal(t, history.TaskCompleted, e.Event.Type())
		require.Equal(t, history.StatusCompleted, e.Status)
	}
	labelled, err := s.EventScan(ctx, &store.EventScanParams{Namespace: store.DefaultNamespace, Since: since, Until: until,
		TaskType: defaultType, EventTypes: []history.Type{history.TaskScheduled}})
	require.NoError(t, err)
	require.Len(t, labelled, 3)
	for _, e := range labelled {
		require.Equal(t, map[string]string{"tenant": "a"}, e.Labels)
		require.Equal(t, defaultType, e.TaskType)
	}
	none, err := s.EventScan(ctx, &store.EventScanParams{Namespace: store.DefaultNamespace, Since: until, Until: until.Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, none, "nothing after the range")
}

func testEventScanRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for name, p := range map[string]*store.EventScanParams{
		"no namespace": {Until: plan.Now(nil)},
		"no until":     {Namespace: store.DefaultNamespace},
		"limit":        {Namespace: store.DefaultNamespace, Until: plan.Now(nil), Limit: store.MaxEventScanLimit + 1},
	} {
		_, err := s.EventScan(ctx, p)
		require.Error(t, err, name)
	}
}

// testQueueStats: per queue, the waiting, due and running tasks now, and
// what finished in the window.
func testQueueStats(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "idle", MaxWaiting: 5}))
	for range 4 {
		start(t, s, spec{})
	}
	start(t, s, spec{RunAt: plan.Now(nil).Add(time.Hour)})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	claimOne(t, s, "w", time.Minute)

	stats, err := s.QueueStatsList(ctx, &store.QueueStatsListParams{Namespace: store.DefaultNamespace, Window: time.Hour})
	require.NoError(t, err)
	byQueue := map[string]store.QueueStats{}
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
func testQueueGauges(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for range 3 {
		start(t, s, spec{})
	}
	start(t, s, spec{Namespace: "elsewhere"})
	claimOne(t, s, "w", time.Minute)
	gauges, err := s.QueueGaugeList(ctx, &store.QueueGaugeListParams{})
	require.NoError(t, err)
	got := map[string]map[history.Status]int64{}
	for _, g := range gauges {
		got[g.Namespace+"/"+g.Queue] = g.Tasks
	}
	require.Equal(t, int64(2), got[store.DefaultNamespace+"/"+defaultQueue][history.StatusPending])
	require.Equal(t, int64(1), got[store.DefaultNamespace+"/"+defaultQueue][history.StatusRunning])
	require.Equal(t, int64(1), got["elsewhere/"+defaultQueue][history.StatusPending])

	// A namespace named: its gauges only.
	gauges, err = s.QueueGaugeList(ctx, &store.QueueGaugeListParams{Namespace: "elsewhere"})
	require.NoError(t, err)
	require.Len(t, gauges, 1)
	require.Equal(t, "elsewhere", gauges[0].Namespace)
	require.Equal(t, map[history.Status]int64{history.StatusPending: 1}, gauges[0].Tasks)
}

// testQueueWaits: per queue and priority, the due waiting tasks and the
// run time of the oldest, highest priority first; tasks not yet due,
// running, or of another namespace are not waiting.
func testQueueWaits(t *testing.T, s store.Store) {
	ctx := testContext(t)
	now := plan.Now(nil)
	start(t, s, spec{RunAt: now.Add(-time.Minute)})
	start(t, s, spec{RunAt: now.Add(-30 * time.Second)})
	running := start(t, s, spec{Priority: 5, RunAt: now.Add(-2 * time.Minute)})
	start(t, s, spec{Priority: 5, RunAt: now.Add(-time.Second)})
	start(t, s, spec{RunAt: now.Add(time.Hour)})
	start(t, s, spec{Namespace: "elsewhere", RunAt: now.Add(-time.Minute)})
	start(t, s, spec{Queue: "other", RunAt: now.Add(-time.Minute)})
	require.Equal(t, running, claimOne(t, s, "w", time.Minute).Task.ID, "the oldest due of the highest priority")

	waits, err := s.QueueWaitList(ctx, &store.QueueWaitListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, waits, 3, "%+v", waits)
	require.Equal(t, []string{defaultQueue, defaultQueue, "other"}, []string{waits[0].Queue, waits[1].Queue, waits[2].Queue})
	require.Equal(t, []int{5, 0, 0}, []int{waits[0].Priority, waits[1].Priority, waits[2].Priority}, "by queue, highest priority first")
	require.Equal(t, []int{1, 2, 1}, []int{waits[0].Waiting, waits[1].Waiting, waits[2].Waiting},
		"neither the running task nor the one due in an hour")
	require.WithinDuration(t, now.Add(-time.Minute), waits[1].Oldest, time.Millisecond, "the oldest's run time")

	none, err := s.QueueWaitList(ctx, &store.QueueWaitListParams{Namespace: "nobody"})
	require.NoError(t, err)
	require.Empty(t, none)
}

// testNamespaceRequired: the reads and writes of a namespace's queues,
// types, tasks and dead letters refuse parameters that name none (or
// none at all) rather than read or write the namespace "".
func testNamespaceRequired(t *testing.T, s store.Store) {
	ctx := testContext(t)
	start(t, s, spec{})
	refused := func(name string, err error) {
		t.Helper()
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "namespace", name)
	}
	_, err := s.QueueList(ctx, &store.QueueListParams{})
	refused("QueueList", err)
	_, err = s.QueueList(ctx, nil)
	refused("QueueList nil", err)
	_, err = s.QueueWaitList(ctx, &store.QueueWaitListParams{})
	refused("QueueWaitList", err)
	_, err = s.QueueStatsList(ctx, &store.QueueStatsListParams{Window: time.Hour})
	refused("QueueStatsList", err)
	_, err = s.TaskTypeList(ctx, &store.TaskTypeListParams{})
	refused("TaskTypeList", err)
	_, err = s.TaskList(ctx, &store.TaskListParams{})
	refused("TaskList", err)
	_, err = s.DeadLetterList(ctx, &store.DeadLetterListParams{})
	refused("DeadLetterList", err)
	refused("QueueSet", s.QueueSet(ctx, &store.QueueSetParams{Name: "q"}))
	refused("RateLimitSet", s.RateLimitSet(ctx, &store.RateLimitSetParams{TaskType: defaultType, MaxStarts: 1, Per: time.Second}))
	refused("RateLimitDelete", s.RateLimitDelete(ctx, &store.RateLimitDeleteParams{TaskType: defaultType}))
	refused("TaskTypeRegister", s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Worker: "w",
		Types: []store.TaskType{{Type: defaultType, Version: 1, Queue: defaultQueue}}}))

	// The other refusals of these parameters.
	_, err = s.QueueStatsList(ctx, &store.QueueStatsListParams{Namespace: store.DefaultNamespace})
	require.Error(t, err, "no window")
	require.Error(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: store.DefaultNamespace, TaskType: defaultType, Per: time.Second}),
		"no starts")
	require.Error(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: store.DefaultNamespace, MaxStarts: 1, Per: time.Second}),
		"no type")
	require.Len(t, claim(t, s, claimParams("w", 5, time.Minute)), 1, "nothing limits the task")
}

// A queue with no history at all: a healthy diagnosis whose lists are
// empty, never null, in JSON.
func testDiagnoseEmptyQueue(t *testing.T, s store.Store) {
	d, err := diagnosis.Diagnose(testContext(t), s, &store.QueueDiagnoseParams{Namespace: "default", Queue: "idle", Window: time.Minute})
	require.NoError(t, err)
	require.True(t, d.Healthy)
	require.Empty(t, d.Causes)
	require.True(t, strings.HasPrefix(d.Summary, "healthy"), d.Summary)
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	for _, key := range []string{`"causes":[]`, `"worker_ids":[]`, `"waiting_by_type":[]`, `"waiting_by_fairness_key":[]`,
		`"rate_limits":[]`, `"window_ms":60000`, `"oldest_wait_ms":0`, `"retry_share":0`, `"since_last_start_ms":60000`} {
		require.Contains(t, string(raw), key)
	}
	require.NotContains(t, string(raw), "null")
}

func testDiagnoseRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for _, p := range []*store.QueueDiagnoseParams{
		nil,
		{Namespace: "default", Window: time.Minute},
		{Namespace: "default", Queue: "q", Window: time.Second},
		{Namespace: "default", Queue: "q", Window: 25 * time.Hour},
	} {
		_, err := diagnosis.Diagnose(ctx, s, p)
		require.Error(t, err, "%+v", p)
	}
	_, err := diagnosis.Diagnose(ctx, s, &store.QueueDiagnoseParams{Namespace: "default", Queue: "q", Window: time.Second})
	require.ErrorContains(t, err, "window 1s must be between 2s and 24h0m0s")
}

// testDiagnoseCounts: a diagnosis through the store's own writes (no hand
// built rows): what started, failed, finished and waits in the last
// minute is counted in the window's second half.
func testDiagnoseCounts(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for range 4 {
		start(t, s, spec{})
	}
	complete(t, s, claimOne(t, s, "w1", time.Minute))
	failed := claimOne(t, s, "w2", time.Minute)
	_, err := appendFenced(t, s, failed, history.AttemptFailedData{
		Error:     history.ErrorInfo{Class: history.Transient, Kind: "unavailable", Status: 503, Message: "try later"},
		NextRunAt: ptrTime(plan.Now(nil).Add(time.Hour)),
	})
	require.NoError(t, err)
	claimOne(t, s, "w3", time.Minute)

	d, err := diagnosis.Diagnose(ctx, s, &store.QueueDiagnoseParams{Namespace: store.DefaultNamespace, Queue: defaultQueue, Window: 2 * time.Minute})
	require.NoError(t, err)
	now := d.Now
	require.Equal(t, []int{4, 1, 1, 3, 0, 1}, []int{now.Inflow, now.Outflow, now.Completed, now.AttemptsStarted, now.Retries, now.AttemptsFailed},
		"inflow, outflow, completed, started, retries, failed")
	require.Equal(t, []string{"w1", "w2", "w3"}, now.WorkerIDs)
	require.Equal(t, 2, now.Attempts.Count, "two attempts ended")
	require.Equal(t, []store.ErrorStats{{Type: defaultType, Class: "transient", Kind: "unavailable", Status: 503, Count: 1, Message: "try later"}}, now.Errors)
	require.Equal(t, 1, d.Depth.Pending)
	require.Equal(t, 1, d.Depth.Retrying)
	require.Equal(t, 1, d.Depth.Running)
	require.Equal(t, 1, d.Depth.Due)
	require.Zero(t, d.Then.Inflow)
}

func ptrTime(t time.Time) *time.Time { return &t }
