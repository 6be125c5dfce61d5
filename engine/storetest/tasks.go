package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// taskTests: starting tasks, reading them back, idempotency.
var taskTests = []conformanceTest{
	{"TaskStartThenGetByIDReturnsTheRow", testTaskStartThenGetByID},
	{"TaskGetByIDUnknownIsNotFound", testTaskGetByIDUnknownIsNotFound},
	{"TaskGetByIDOtherNamespaceIsNotFound", testTaskGetByIDOtherNamespaceIsNotFound},
	{"TaskGetByIdempotencyKey", testTaskGetByKey},
	{"TaskStartRefusesWhatCannotReplay", testTaskStartRefusesWhatCannotReplay},
	{"IdempotencyKeyReturnsExistingTask", testIdempotencyKeyReturnsExistingTask},
	{"IdempotencyKeyIsPerNamespace", testIdempotencyKeyIsPerNamespace},
	{"TaskStartManyDedupsKeysWithinTheBatch", testTaskStartManyDedupsWithinBatch},
	{"IdempotencyKeyReuseRefused", testIdempotencyKeyReuseRefused},
	{"TaskListFiltersNewestFirst", testTaskListFiltersNewestFirst},
	{"Ping", func(t *testing.T, s store.Store) { require.NoError(t, s.Ping(testContext(t))) }},
}

func testTaskStartThenGetByID(t *testing.T, s store.Store) {
	ctx := testContext(t)
	runAt := time.Now().Add(time.Hour)
	res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "ns1", Scheduled: history.TaskScheduledData{
		Namespace: "ignored", TaskType: "doc", TypeVersion: 2, Queue: "q", Priority: 7,
		Input: json.RawMessage(`{"b": [1, 2], "a": "x"}`), RunAt: runAt, IdempotencyKey: "k",
		TraceID: "trace-1", Labels: map[string]string{"team": "x"}, MaxAttempts: 4,
	}})
	require.NoError(t, err)
	require.False(t, res.Existing)
	require.NotEqual(t, uuid.Nil, res.ID)

	task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "ns1", ID: res.ID})
	require.NoError(t, err)
	require.Equal(t, res.ID, task.ID)
	require.Equal(t, "ns1", task.Namespace, "the params' namespace wins over the payload's")
	require.Equal(t, history.StatusPending, task.Status)
	require.Equal(t, "q", task.Queue)
	require.Equal(t, "doc", task.Type)
	require.Equal(t, 2, task.TypeVersion)
	require.Equal(t, 7, task.Priority)
	require.Equal(t, 4, task.MaxAttempts)
	require.Equal(t, "k", task.IdempotencyKey)
	require.Equal(t, "trace-1", task.TraceID)
	require.Equal(t, map[string]string{"team": "x"}, task.Labels)
	require.JSONEq(t, `{"a": "x", "b": [1, 2]}`, string(task.Input))
	require.WithinDuration(t, runAt, task.RunAt, time.Microsecond)
	require.Zero(t, task.Attempt)
	require.Zero(t, task.LeaseEpoch)
	require.Empty(t, task.LeaseOwner)
	require.Nil(t, task.LeaseExpiresAt)
	require.Nil(t, task.StartedAt)
	require.Nil(t, task.FinishedAt)
	require.Empty(t, task.Output)
	require.Equal(t, int64(1), task.LastSeq)

	evs := events(t, s, res.ID)
	require.Len(t, evs, 1)
	require.Equal(t, int64(1), evs[0].Seq)
	sc, ok := evs[0].Data.(history.TaskScheduledData)
	require.True(t, ok, "first event is %T", evs[0].Data)
	require.Equal(t, "ns1", sc.Namespace)
	require.Equal(t, "doc", sc.TaskType)
	require.Equal(t, map[string]string{"team": "x"}, sc.Labels)

	many, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []uuid.UUID{res.ID, uuid.New()}})
	require.NoError(t, err)
	require.Len(t, many, 1, "an unknown id is left out")
	require.Equal(t, res.ID, many[0].ID)
	require.Equal(t, 1, requireReplayMatches(t, s))
}

func testTaskGetByIDUnknownIsNotFound(t *testing.T, s store.Store) {
	start(t, s, spec{})
	_, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: uuid.New()})
	requireIs(t, err, store.ErrNotFound)
}

func testTaskGetByIDOtherNamespaceIsNotFound(t *testing.T, s store.Store) {
	id := start(t, s, spec{Namespace: "tenant-a"})
	_, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: "tenant-b", ID: id})
	requireIs(t, err, store.ErrNotFound, "a task is found only in its own namespace")
	_, err = s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	requireIs(t, err, store.ErrNotFound)
	task, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: "tenant-a", ID: id})
	require.NoError(t, err)
	require.Equal(t, "tenant-a", task.Namespace)
}

// testTaskGetByKey: a task is read by the idempotency key it was started
// with, in its namespace; the params name one task, by id or by key.
func testTaskGetByKey(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a := start(t, s, spec{Namespace: "tenant-a", IdempotencyKey: "order-7"})
	b := start(t, s, spec{Namespace: "tenant-b", IdempotencyKey: "order-7"})
	for ns, want := range map[string]uuid.UUID{"tenant-a": a, "tenant-b": b} {
		task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: ns, IdempotencyKey: "order-7"})
		require.NoError(t, err, ns)
		require.Equal(t, want, task.ID, "a key is told apart per namespace")
		require.Equal(t, ns, task.Namespace)
		require.Equal(t, "order-7", task.IdempotencyKey)
		require.Equal(t, int64(1), task.LastSeq)
	}
	_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, IdempotencyKey: "order-7"})
	requireIs(t, err, store.ErrNotFound, "not in this namespace")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: "tenant-a", IdempotencyKey: "order-8"})
	requireIs(t, err, store.ErrNotFound, "no task holds the key")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: "tenant-a"})
	requireIs(t, err, store.ErrNotFound, "neither an id nor a key: no task")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: "tenant-a", ID: a, IdempotencyKey: "order-7"})
	require.Error(t, err, "an id and a key")
	require.NotErrorIs(t, err, store.ErrNotFound)
}

func testTaskStartRefusesWhatCannotReplay(t *testing.T, s store.Store) {
	ctx := testContext(t)
	_, err := s.TaskStart(ctx, &store.TaskStartParams{Scheduled: history.TaskScheduledData{TaskType: "x", Queue: "default"}})
	require.Error(t, err, "no namespace")
	_, err = s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{Queue: "default"}})
	require.Error(t, err, "no task type: task_scheduled would not replay")
	require.Zero(t, taskCount(t, s), "a refused start writes nothing")
}

func testIdempotencyKeyReturnsExistingTask(t *testing.T, s store.Store) {
	ctx := testContext(t)
	sp := spec{IdempotencyKey: "order-42", Input: json.RawMessage(`1`)}
	first, err := s.TaskStart(ctx, sp.params())
	require.NoError(t, err)
	require.False(t, first.Existing)

	// Different input, same key: still the first task.
	sp.Input = json.RawMessage(`2`)
	second, err := s.TaskStart(ctx, sp.params())
	require.NoError(t, err)
	require.True(t, second.Existing)
	require.Equal(t, first.ID, second.ID)

	require.Equal(t, 1, taskCount(t, s))
	require.Len(t, events(t, s, first.ID), 1, "nothing appended to the existing task")
	require.JSONEq(t, `1`, string(getTask(t, s, first.ID).Input), "the first start's input stays")

	// A task without a key is never deduplicated.
	a, b := start(t, s, spec{}), start(t, s, spec{})
	require.NotEqual(t, a, b)
	require.Equal(t, 3, taskCount(t, s))
}

func testIdempotencyKeyIsPerNamespace(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a, err := s.TaskStart(ctx, spec{Namespace: "a", IdempotencyKey: "k"}.params())
	require.NoError(t, err)
	b, err := s.TaskStart(ctx, spec{Namespace: "b", IdempotencyKey: "k"}.params())
	require.NoError(t, err)
	require.False(t, b.Existing, "the same key in another namespace is another task")
	require.NotEqual(t, a.ID, b.ID)
	again, err := s.TaskStart(ctx, spec{Namespace: "b", IdempotencyKey: "k"}.params())
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, b.ID, again.ID)
	require.Equal(t, 2, taskCount(t, s))
}

func testTaskStartManyDedupsWithinBatch(t *testing.T, s store.Store) {
	ctx := testContext(t)
	res, err := s.TaskStartMany(ctx, []*store.TaskStartParams{
		spec{IdempotencyKey: "k1", Input: json.RawMessage(`"first"`)}.params(),
		spec{IdempotencyKey: "k1", Input: json.RawMessage(`"second"`)}.params(),
		spec{IdempotencyKey: "k2"}.params(),
		spec{}.params(),
	})
	require.NoError(t, err)
	require.Len(t, res, 4, "one result per start, in order")
	require.False(t, res[0].Existing)
	require.True(t, res[1].Existing, "the second start of k1 in the batch creates nothing")
	require.Equal(t, res[0].ID, res[1].ID)
	require.False(t, res[2].Existing)
	require.False(t, res[3].Existing)
	require.Len(t, map[uuid.UUID]bool{res[0].ID: true, res[2].ID: true, res[3].ID: true}, 3)
	require.Equal(t, 3, taskCount(t, s))
	require.JSONEq(t, `"first"`, string(getTask(t, s, res[0].ID).Input), "the batch's first start of a key wins")

	// A later batch finds the keys taken.
	later, err := s.TaskStartMany(ctx, []*store.TaskStartParams{spec{IdempotencyKey: "k2"}.params(), spec{IdempotencyKey: "k3"}.params()})
	require.NoError(t, err)
	require.Len(t, later, 2)
	require.Equal(t, store.TaskStartResult{ID: res[2].ID, Existing: true}, later[0])
	require.False(t, later[1].Existing)
	require.Equal(t, 4, taskCount(t, s))

	none, err := s.TaskStartMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, 4, requireReplayMatches(t, s))
}

func testTaskListFiltersNewestFirst(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a := start(t, s, spec{Type: "x"})
	b := start(t, s, spec{Type: "y", Queue: "q2"})
	c := start(t, s, spec{Type: "x"})
	d := start(t, s, spec{Type: "x", Namespace: "other"})
	claimed := claim(t, s, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"q2"},
		Types: []store.TypeKey{{Type: "y", Version: 1}}, Owner: "w", Max: 10, LeaseTTL: time.Minute})
	require.Len(t, claimed, 1)
	complete(t, s, claimed[0])

	list := func(p store.TaskListParams) []uuid.UUID {
		t.Helper()
		tasks, err := s.TaskList(ctx, &p)
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(tasks))
		for i, task := range tasks {
			ids[i] = task.ID
		}
		return ids
	}
	require.Equal(t, []uuid.UUID{c, b, a}, list(store.TaskListParams{Namespace: store.DefaultNamespace}), "newest first")
	require.Equal(t, []uuid.UUID{c, a}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Type: "x"}))
	require.Equal(t, []uuid.UUID{b}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Queue: "q2"}))
	require.Equal(t, []uuid.UUID{b}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Status: history.StatusCompleted}))
	require.Equal(t, []uuid.UUID{c, a}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Status: history.StatusPending}))
	require.Equal(t, []uuid.UUID{c}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Limit: 1}))
	require.Equal(t, []uuid.UUID{b}, list(store.TaskListParams{Namespace: store.DefaultNamespace, Limit: 1, Before: c}), "a page after c")
	require.Equal(t, []uuid.UUID{d}, list(store.TaskListParams{Namespace: "other"}))
	require.Empty(t, list(store.TaskListParams{Namespace: "nobody"}))
}
