package storetest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// queueTests: queue capacity, queue concurrency, rate limits.
var queueTests = []conformanceTest{
	{"BoundedQueueRefusesStartsWhenFull", testBoundedQueue},
	{"BoundedQueueLooksUpIdempotencyKeyFirst", testIdempotencyKeyBeforeCapacity},
	{"BoundedQueueCountsAKeyPerNamespace", testKeyPerNamespaceCountsAgainstCapacity},
	{"QueueConcurrencyLimitsClaims", testQueueConcurrency},
	{"QueueSetRefusesInvalidSettings", testQueueSetRefusals},
	{"RateLimitBoundsStarts", testRateLimit},
	{"RateLimitedTypeLeavesQueueSlotsToOthers", testRateLimitAndConcurrency},
}

// testRateLimitAndConcurrency: a queue of two slots holds tasks of a type
// with one start left and of an unlimited type; the claim fills both
// slots, one of each, rather than losing a slot to the limited type.
func testRateLimitAndConcurrency(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: 2}))
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: store.DefaultNamespace, TaskType: "limited",
		MaxStarts: 1, Per: time.Hour}))
	start(t, s, spec{Type: "limited"})
	start(t, s, spec{Type: "limited"})
	free := start(t, s, spec{Type: "free"})
	p := claimParams("w", 5, time.Minute)
	p.Types = []store.TypeKey{{Type: "limited", Version: 1}, {Type: "free", Version: 1}}
	got := claim(t, s, p)
	require.Len(t, got, 2, "both slots used")
	types := map[string]int{}
	for _, c := range got {
		types[c.Task.Type]++
	}
	require.Equal(t, map[string]int{"limited": 1, "free": 1}, types)
	require.True(t, claimedIDs(got)[free])
}

// leaderTests: the leader lease.
var leaderTests = []conformanceTest{
	{"LeaderLeaseHasOneOwner", testLeader},
	{"IndexSummarizeIsRepeatable", testIndexSummarize},
}

// scheduleTests: cron schedules.
var scheduleTests = []conformanceTest{
	{"ScheduleCreateListPauseDelete", testScheduleRoundTrip},
	{"ScheduleCreateRefusesInvalid", testScheduleRefusals},
	{"ScheduleFiresDueTick", testScheduleFires},
	{"ScheduleIntoFullQueueSkipsAloneAndRetriesLater", testScheduleSkipsFullQueue},
}

// taskTypeTests: registered task types.
var taskTypeTests = []conformanceTest{
	{"TaskTypeRegisterThenList", testTaskTypes},
	{"TaskTypeSignalsDeclared", testTaskTypeSignals},
}

func testBoundedQueue(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "llm", MaxWaiting: 2}))
	llm := spec{Queue: "llm"}
	start(t, s, llm)
	start(t, s, llm)

	_, err := s.TaskStart(ctx, llm.params())
	requireIs(t, err, store.ErrQueueFull)
	var full *store.QueueFullError
	require.True(t, errors.As(err, &full), "the error is a *QueueFullError: %v", err)
	require.Equal(t, store.DefaultNamespace, full.Namespace)
	require.Equal(t, "llm", full.Queue)
	require.Equal(t, 2, full.Waiting)
	require.Equal(t, 2, full.MaxWaiting)
	require.Equal(t, 1, full.Adding)
	require.Equal(t, 2, taskCount(t, s), "nothing of a refused start is written")

	// A batch that would pass the bound is refused whole, even the start
	// into another queue.
	_, err = s.TaskStartMany(ctx, []*store.TaskStartParams{spec{}.params(), llm.params()})
	requireIs(t, err, store.ErrQueueFull)
	require.Equal(t, 2, taskCount(t, s))

	// Other queues, and another namespace's queue of the same name, are
	// not bounded.
	start(t, s, spec{})
	start(t, s, spec{Queue: "llm", Namespace: "tenant-b"})
	require.Equal(t, 4, taskCount(t, s))

	queues, err := s.QueueList(ctx, &store.QueueListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, []store.QueueInfo{{QueueConfig: store.QueueConfig{Namespace: store.DefaultNamespace, Name: "llm", MaxWaiting: 2},
		Waiting: 2, Running: 0}}, queues)

	// A claimed task no longer waits: there is room for one more.
	claimed := claim(t, s, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"llm"},
		Types: []store.TypeKey{defaultKey}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.Len(t, claimed, 1)
	start(t, s, llm)
	_, err = s.TaskStart(ctx, llm.params())
	requireIs(t, err, store.ErrQueueFull)
	require.Equal(t, 5, taskCount(t, s))
}

func testQueueConcurrency(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "gpu", Concurrency: 1}))
	for range 3 {
		start(t, s, spec{Queue: "gpu"})
	}
	p := &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"gpu"},
		Types: []store.TypeKey{defaultKey}, Owner: "w", Max: 5, LeaseTTL: time.Minute}
	first := claim(t, s, p)
	require.Len(t, first, 1, "one may run at once")
	require.Empty(t, claim(t, s, p), "none while one runs")

	queues, err := s.QueueList(ctx, &store.QueueListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, []store.QueueInfo{{QueueConfig: store.QueueConfig{Namespace: store.DefaultNamespace, Name: "gpu", Concurrency: 1},
		Waiting: 2, Running: 1}}, queues)

	complete(t, s, first[0])
	second := claim(t, s, p)
	require.Len(t, second, 1, "the next once the first finished")
	require.NotEqual(t, first[0].Task.ID, second[0].Task.ID)

	// Raising the limit lets more run.
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "gpu", Concurrency: 3}))
	require.Len(t, claim(t, s, p), 1, "the last waiting task")
}

func testQueueSetRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.Error(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "q", MaxWaiting: -1}))
	require.Error(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "q", Concurrency: -1}))
	require.Error(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, MaxWaiting: 1}), "no name")
	queues, err := s.QueueList(ctx, &store.QueueListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Empty(t, queues)
}

func testRateLimit(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: store.DefaultNamespace, TaskType: defaultType,
		MaxStarts: 2, Per: time.Hour}))
	for range 4 {
		start(t, s, spec{})
	}
	require.Len(t, claim(t, s, claimParams("w", 5, time.Minute)), 2, "two starts per hour")
	require.Empty(t, claim(t, s, claimParams("w", 5, time.Minute)), "the bucket is empty")
	require.NoError(t, s.RateLimitDelete(ctx, &store.RateLimitDeleteParams{Namespace: store.DefaultNamespace, TaskType: defaultType}))
	require.Len(t, claim(t, s, claimParams("w", 5, time.Minute)), 2, "no limit once deleted")
}

func testLeader(t *testing.T, s store.Store) {
	ctx := testContext(t)
	attempt := func(name, owner string) bool {
		t.Helper()
		ok, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: name, Owner: owner, TTL: time.Hour})
		require.NoError(t, err)
		return ok
	}
	require.True(t, attempt("rescuer", "a"))
	require.False(t, attempt("rescuer", "b"), "one owner at a time")
	require.True(t, attempt("rescuer", "a"), "the owner renews")
	require.True(t, attempt("cron", "b"), "roles are independent")

	require.NoError(t, s.LeaderResign(ctx, &store.LeaderResignParams{Name: "rescuer", Owner: "b"}), "resigning a lease one does not hold does nothing")
	require.False(t, attempt("rescuer", "b"))
	require.NoError(t, s.LeaderResign(ctx, &store.LeaderResignParams{Name: "rescuer", Owner: "a"}))
	require.True(t, attempt("rescuer", "b"), "resigning hands over at once")
	require.False(t, attempt("rescuer", "a"))

	// An expired lease passes to the next taker.
	ok, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: "retention", Owner: "a", TTL: shortTTL})
	require.NoError(t, err)
	require.True(t, ok)
	waitFor(t, "b to take over the expired lease", func() bool { return attempt("retention", "b") })
	require.False(t, attempt("retention", "a"))
}

// testIndexSummarize: the leader's summary of range indexes may be run at
// any time, on the store or in a transaction; a second run right after
// the first finds nothing left to summarize. (What it summarizes is
// PostgreSQL's: engine/pgstore's TestIndexSummarize.)
func testIndexSummarize(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for range 50 {
		start(t, s, spec{})
	}
	first, err := s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, first, 0)
	again, err := s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, again, "nothing written since the last summary")
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	n, err := tx.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, tx.Commit(ctx))
}

// schedule is a valid schedule of namespace ns.
func schedule(ns, name string) *store.ScheduleCreateParams {
	return &store.ScheduleCreateParams{Namespace: ns, Name: name, Cron: "*/5 * * * *", TaskType: "report", TypeVersion: 1,
		Queue: "reports", Input: json.RawMessage(`{"kind": "daily"}`), MaxAttempts: 3}
}

func testScheduleRoundTrip(t *testing.T, s store.Store) {
	ctx := testContext(t)
	before := time.Now()
	require.NoError(t, s.ScheduleCreate(ctx, schedule(store.DefaultNamespace, "nightly")))
	require.NoError(t, s.ScheduleCreate(ctx, schedule(store.DefaultNamespace, "audit")))
	require.NoError(t, s.ScheduleCreate(ctx, schedule("tenant-b", "nightly")))

	list, err := s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "audit", list[0].Name, "by name")
	sc := list[1]
	require.Equal(t, "nightly", sc.Name)
	require.Equal(t, store.DefaultNamespace, sc.Namespace)
	require.Equal(t, "*/5 * * * *", sc.Cron)
	require.Equal(t, "UTC", sc.Timezone, "the default time zone")
	require.Equal(t, "report", sc.TaskType)
	require.Equal(t, 1, sc.TypeVersion)
	require.Equal(t, "reports", sc.Queue)
	require.JSONEq(t, `{"kind": "daily"}`, string(sc.Input))
	require.Equal(t, 3, sc.MaxAttempts)
	require.False(t, sc.Paused)
	require.Nil(t, sc.LastTick, "never fired")
	require.True(t, sc.NextRunAt.After(before), "the first tick is after now: %s", sc.NextRunAt)
	require.False(t, sc.NextRunAt.After(before.Add(5*time.Minute+time.Second)), "within one period: %s", sc.NextRunAt)
	require.Zero(t, sc.NextRunAt.Minute()%5)

	// The next due tick is the earliest of every namespace's schedules.
	other, err := s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Len(t, other, 1, "another namespace's schedule of the same name is its own")
	earliest := other[0].NextRunAt
	for _, sc := range list {
		if sc.NextRunAt.Before(earliest) {
			earliest = sc.NextRunAt
		}
	}
	next, ok, err := s.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{})
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(earliest), "the next due tick %s, the earliest schedule's %s", next, earliest)
	next, ok, err = s.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, next.Equal(other[0].NextRunAt), "a namespace's next due tick is its own schedules'")
	_, ok, err = s.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{Namespace: "nobody"})
	require.NoError(t, err)
	require.False(t, ok, "a namespace without schedules has none due")

	require.NoError(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: store.DefaultNamespace, Name: "nightly", Paused: true}))
	list, err = s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.True(t, list[1].Paused)
	require.False(t, list[0].Paused, "only the named schedule")
	require.NoError(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: store.DefaultNamespace, Name: "nightly", Paused: false}))
	list, err = s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.False(t, list[1].Paused, "resumed")
	requireIs(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: store.DefaultNamespace, Name: "nope", Paused: true}), store.ErrNotFound)

	require.NoError(t, s.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Namespace: store.DefaultNamespace, Name: "nightly"}))
	list, err = s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "audit", list[0].Name)
	requireIs(t, s.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Namespace: store.DefaultNamespace, Name: "nightly"}), store.ErrNotFound, "deleted already")

	other, err = s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Len(t, other, 1, "deleting one namespace's schedule leaves another's of the same name")
	require.Equal(t, "nightly", other[0].Name)

	// With every schedule paused, none is due.
	require.NoError(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: store.DefaultNamespace, Name: "audit", Paused: true}))
	require.NoError(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: "tenant-b", Name: "nightly", Paused: true}))
	_, ok, err = s.ScheduleNextDue(ctx, &store.ScheduleNextDueParams{})
	require.NoError(t, err)
	require.False(t, ok)
}

func testScheduleRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	require.NoError(t, s.ScheduleCreate(ctx, schedule(store.DefaultNamespace, "nightly")))
	requireIs(t, s.ScheduleCreate(ctx, schedule(store.DefaultNamespace, "nightly")), store.ErrConflict, "a name is used once per namespace")

	bad := schedule(store.DefaultNamespace, "bad")
	bad.Cron = "not a cron"
	require.Error(t, s.ScheduleCreate(ctx, bad))
	bad = schedule(store.DefaultNamespace, "bad")
	bad.Timezone = "Mars/Olympus"
	require.Error(t, s.ScheduleCreate(ctx, bad))
	bad = schedule(store.DefaultNamespace, "bad")
	bad.TaskType = ""
	require.Error(t, s.ScheduleCreate(ctx, bad))

	list, err := s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 1, "nothing of a refused schedule is stored")

	// A namespace's requests name it.
	_, err = s.ScheduleList(ctx, &store.ScheduleListParams{})
	require.ErrorContains(t, err, "namespace is required")
	require.ErrorContains(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Name: "nightly", Paused: true}), "namespace is required")
	require.ErrorContains(t, s.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Name: "nightly"}), "namespace is required")
	list, err = s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.False(t, list[0].Paused, "a refused pause pauses nothing")
}

func testScheduleFires(t *testing.T, s store.Store) {
	ctx := testContext(t)
	sc := schedule(store.DefaultNamespace, "often")
	sc.Cron = "@every 1s"
	require.NoError(t, s.ScheduleCreate(ctx, sc))
	waitFor(t, "the schedule's first tick", func() bool {
		firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
		require.NoError(t, err)
		require.LessOrEqual(t, len(firings), 1)
		return len(firings) == 1 && firings[0].Started
	})
	tasks, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	task := tasks[0]
	require.Equal(t, "report", task.Type)
	require.Equal(t, "reports", task.Queue)
	require.Equal(t, 3, task.MaxAttempts)
	require.Equal(t, history.StatusPending, task.Status)
	require.JSONEq(t, `{"kind": "daily"}`, string(task.Input))
	require.Equal(t, "often", task.Labels["schedule"])
	require.True(t, strings.HasPrefix(task.IdempotencyKey, "schedule:often:"), "key %q", task.IdempotencyKey)

	list, err := s.ScheduleList(ctx, &store.ScheduleListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NotNil(t, list[0].LastTick)
	require.True(t, list[0].NextRunAt.After(*list[0].LastTick), "moved to the next tick")

	// A paused schedule does not fire.
	require.NoError(t, s.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: store.DefaultNamespace, Name: "often", Paused: true}))
	time.Sleep(1100 * time.Millisecond)
	firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
	require.NoError(t, err)
	require.Empty(t, firings)
	require.Equal(t, 1, taskCount(t, s))
}

func testTaskTypes(t *testing.T, s store.Store) {
	ctx := testContext(t)
	before := time.Now().Add(-time.Minute)
	require.NoError(t, s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: store.DefaultNamespace, Worker: "worker-1",
		Types: []store.TaskType{
			{Type: "mail", Version: 2, Queue: "default"},
			{Type: "doc", Version: 1, Queue: "docs", MaxAttempts: 3, ScheduleToClose: time.Minute},
		}}))
	require.NoError(t, s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: "tenant-b", Worker: "worker-9",
		Types: []store.TaskType{{Type: "other", Version: 1, Queue: "q"}}}))
	require.NoError(t, s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: store.DefaultNamespace, Worker: "worker-1"}))

	types, err := s.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, types, 2)
	require.Equal(t, "doc", types[0].Type, "by name")
	require.Equal(t, "mail", types[1].Type)
	doc := types[0]
	require.Equal(t, store.DefaultNamespace, doc.Namespace)
	require.Equal(t, 1, doc.Version)
	require.Equal(t, "docs", doc.Queue)
	require.Equal(t, 3, doc.MaxAttempts)
	require.Equal(t, time.Minute, doc.ScheduleToClose)
	require.Equal(t, "worker-1", doc.RegisteredBy)
	require.True(t, doc.RegisteredAt.After(before), "registered at %s", doc.RegisteredAt)
	require.Equal(t, 2, types[1].Version)
	require.Zero(t, types[1].MaxAttempts)
	require.Zero(t, types[1].ScheduleToClose)

	// Registered again: the latest worker's defaults.
	require.NoError(t, s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: store.DefaultNamespace, Worker: "worker-2",
		Types: []store.TaskType{{Type: "doc", Version: 1, Queue: "docs-v2", MaxAttempts: 5}}}))
	types, err = s.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, types, 2)
	require.Equal(t, "docs-v2", types[0].Queue)
	require.Equal(t, 5, types[0].MaxAttempts)
	require.Zero(t, types[0].ScheduleToClose)
	require.Equal(t, "worker-2", types[0].RegisteredBy)

	other, err := s.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Len(t, other, 1)
	require.Equal(t, "other", other[0].Type)
	none, err := s.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: "nobody"})
	require.NoError(t, err)
	require.Empty(t, none)
	require.Nil(t, types[0].Signals, "no declaration: NULL")
}

// testTaskTypeSignals: the signals a type declares are kept per version,
// read back as written (nil, none declared; empty, it takes none), and
// replaced by the latest registration; what one store could not keep,
// both refuse.
func testTaskTypeSignals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	approval := json.RawMessage(`{"type":"object","required":["approved"],"properties":{"approved":{"type":"boolean"}}}`)
	register := func(types ...store.TaskType) error {
		return s.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: store.DefaultNamespace, Worker: "w", Types: types})
	}
	require.NoError(t, register(
		store.TaskType{Type: "review", Version: 1, Queue: "default"},
		store.TaskType{Type: "review", Version: 2, Queue: "default", Signals: map[string]json.RawMessage{"approval": approval, "note": json.RawMessage(`true`)}},
		store.TaskType{Type: "silent", Version: 1, Queue: "default", Signals: map[string]json.RawMessage{}},
	))
	list := func() map[string]store.TaskType {
		types, err := s.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: store.DefaultNamespace})
		require.NoError(t, err)
		out := map[string]store.TaskType{}
		for _, tt := range types {
			out[tt.Type+"@"+strconv.Itoa(tt.Version)] = tt
		}
		return out
	}
	types := list()
	require.Nil(t, types["review@1"].Signals)
	v2 := types["review@2"].Signals
	require.Len(t, v2, 2)
	require.JSONEq(t, string(approval), string(v2["approval"]))
	require.JSONEq(t, `true`, string(v2["note"]))
	require.NotNil(t, types["silent@1"].Signals, "declares none: not nil")
	require.Empty(t, types["silent@1"].Signals)

	// Registered again without declarations: the latest worker's.
	require.NoError(t, register(store.TaskType{Type: "review", Version: 2, Queue: "default"}))
	require.Nil(t, list()["review@2"].Signals)

	for name, bad := range map[string]map[string]json.RawMessage{
		"no name":     {"": approval},
		"not JSON":    {"approval": json.RawMessage(`{"type":`)},
		"a string":    {"approval": json.RawMessage(`"object"`)},
		"NUL escape":  {"approval": json.RawMessage(`{"description":"a\u0000b"}`)},
		"bad UTF-8":   {"approval": json.RawMessage("{\"description\":\"\xff\"}")},
		"empty value": {"approval": json.RawMessage(``)},
	} {
		err := register(store.TaskType{Type: "review", Version: 3, Queue: "default", Signals: bad})
		require.Error(t, err, name)
	}
	_, ok := list()["review@3"]
	require.False(t, ok, "a refused registration writes nothing")
}
