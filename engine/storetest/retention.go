package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// retentionTests: the removal of finished tasks' whole logs, through
// retention's transaction over the store (maintenance.RemoveFinished), and
// its listing (TaskRemovableList).
var retentionTests = []conformanceTest{
	{"RemoveFinishedRemovesWholeLogsOfFinishedTasksOnly", testRemoveFinishedOnly},
	{"RemoveFinishedKeepsTasksInsideTheWindow", testRemoveKeepsWindow},
	{"RemoveFinishedKeepsFamiliesWithUnfinishedMembers", testRemoveKeepsFamilies},
	{"RemoveFinishedTakesAtMostMaxOldestFirst", testRemoveMaxOldestFirst},
	{"RetiredKeyIsStillTaken", testRetiredKeyIsStillTaken},
	{"KeyIsFreedWithoutOrAfterItsWindow", testKeyFreedWithoutRetirement},
	{"NamespaceSettingsAreSetAndListed", testNamespaceSettings},
	{"RemovableListAndRemovalOfOnlyTheTasksArchived", testRemoveOnly},
	{"ATypesOwnRetentionReplacesTheNamespaces", testTypeRetention},
}

func testTypeRetention(t *testing.T, s store.Store) {
	ctx := testContext(t)
	finish := func(typ string) uuid.UUID {
		t.Helper()
		id := start(t, s, spec{Type: typ})
		p := claimParams("w", 1, time.Minute)
		p.Types = []store.TypeKey{{Type: typ, Version: 1}}
		claimed := claim(t, s, p)
		require.Len(t, claimed, 1)
		complete(t, s, claimed[0])
		return id
	}
	report, ocr, other := finish("report"), finish("ocr"), finish(defaultType)
	now := time.Now()
	// Only "report" goes: the namespace keeps its tasks (no Before), and
	// "ocr"'s own retention is longer than their age.
	p := &store.RemoveFinishedParams{Namespace: store.DefaultNamespace, Max: 10,
		TypeBefore: map[string]time.Time{"report": now.Add(time.Minute), "ocr": now.Add(-time.Hour)}}
	ids, err := removableIDs(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{report}, ids)
	res, err := maintenance.RemoveFinished(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tasks)
	requireRemoved(t, s, report)
	// The namespace's cutoff for the rest; "ocr" keeps its own.
	p.Before = now.Add(time.Minute)
	res, err = maintenance.RemoveFinished(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tasks)
	requireRemoved(t, s, other)
	getTask(t, s, ocr)

	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "typed", Retention: time.Hour,
		TypeRetention: map[string]time.Duration{"report": 90 * time.Second, "ocr.page": 7 * 24 * time.Hour}}))
	list, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
	require.NoError(t, err)
	var typed *store.NamespaceConfig
	for i := range list {
		if list[i].Name == "typed" {
			typed = &list[i]
		}
	}
	require.NotNil(t, typed)
	require.Equal(t, map[string]time.Duration{"report": 90 * time.Second, "ocr.page": 7 * 24 * time.Hour}, typed.TypeRetention)
	err = s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "typed", TypeRetention: map[string]time.Duration{"report": 0}})
	require.ErrorContains(t, err, "retention 0s of task type report is not at least 1ms")
}

// removeFinished removes what finished before before, up to max.
func removeFinished(t *testing.T, s store.Store, before time.Time, max int) store.RemoveResult {
	t.Helper()
	res, err := maintenance.RemoveFinished(testContext(t), s, &store.RemoveFinishedParams{
		Namespace: store.DefaultNamespace, Before: before, Max: max,
	})
	require.NoError(t, err)
	return res
}

// removableIDs are the ids TaskRemovableList lists (unlocked) for p.
func removableIDs(ctx context.Context, s store.Store, p *store.RemoveFinishedParams) ([]uuid.UUID, error) {
	found, err := s.TaskRemovableList(ctx, &store.TaskRemovableListParams{
		Namespace: p.Namespace, Before: p.Before, TypeBefore: p.TypeBefore, Max: p.Max,
	})
	var ids []uuid.UUID
	for _, r := range found {
		ids = append(ids, r.ID)
	}
	return ids, err
}

// requireRemoved checks that id is gone whole: no row, no event.
func requireRemoved(t *testing.T, s store.Store, id uuid.UUID) {
	t.Helper()
	_, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	require.ErrorIs(t, err, store.ErrNotFound, "task %s's row is gone", id)
	require.Empty(t, events(t, s, id), "task %s's events are gone", id)
}

func testRemoveFinishedOnly(t *testing.T, s store.Store) {
	done := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	failed := start(t, s, spec{MaxAttempts: 1})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := appendFenced(t, s, ct, history.TaskFailedData{Error: history.ErrorInfo{Message: "no"}})
	require.NoError(t, err)
	running := start(t, s, spec{})
	claimOne(t, s, "w", time.Minute)
	pending := start(t, s, spec{})
	removedEvents := len(events(t, s, done)) + len(events(t, s, failed))

	res := removeFinished(t, s, time.Now().Add(time.Hour), 100)
	require.Equal(t, store.RemoveResult{Tasks: 2, Events: removedEvents}, res)
	requireRemoved(t, s, done)
	requireRemoved(t, s, failed)
	require.Equal(t, history.StatusRunning, getTask(t, s, running).Status, "a running task is never removed")
	require.Equal(t, history.StatusPending, getTask(t, s, pending).Status, "a pending task is never removed")
	require.Equal(t, store.RemoveResult{}, removeFinished(t, s, time.Now().Add(time.Hour), 100), "nothing more to remove")
}

func testRemoveKeepsWindow(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	finished := *getTask(t, s, id).FinishedAt
	require.Equal(t, store.RemoveResult{}, removeFinished(t, s, finished, 100),
		"a task that finished at the cutoff is inside the window")
	require.Equal(t, history.StatusCompleted, getTask(t, s, id).Status)
	require.Equal(t, 1, removeFinished(t, s, finished.Add(time.Microsecond), 100).Tasks)
	requireRemoved(t, s, id)
}

func testRemoveKeepsFamilies(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 2)
	first := claimOne(t, s, "w", time.Minute)
	complete(t, s, first)
	later := time.Now().Add(time.Hour)
	require.Equal(t, store.RemoveResult{}, removeFinished(t, s, later, 100),
		"a finished child of a running parent is kept, and so is the parent")

	parent.State = stateOf(t, s, parent.Task.ID) // the child's end is in its log
	_, err := appendFenced(t, s, parent, history.TaskCompletedData{})
	require.NoError(t, err)
	got := removeFinished(t, s, later, 100)
	require.Equal(t, 1, got.Tasks, "only the finished child goes: the parent has a child still waiting")
	requireRemoved(t, s, first.Task.ID)
	require.NotNil(t, getTask(t, s, parent.Task.ID))
	other := res.IDs[0]
	if other == first.Task.ID {
		other = res.IDs[1]
	}
	require.Equal(t, history.StatusPending, getTask(t, s, other).Status)

	complete(t, s, claimOne(t, s, "w", time.Minute))
	require.Equal(t, 2, removeFinished(t, s, later, 100).Tasks, "with every child finished, the rest of the family goes")
	requireRemoved(t, s, parent.Task.ID)
	requireRemoved(t, s, other)
}

func testRemoveMaxOldestFirst(t *testing.T, s store.Store) {
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, start(t, s, spec{}))
		complete(t, s, claimOne(t, s, "w", time.Minute))
		time.Sleep(2 * time.Millisecond) // distinct finish times
	}
	later := time.Now().Add(time.Hour)
	require.Equal(t, 2, removeFinished(t, s, later, 2).Tasks)
	requireRemoved(t, s, ids[0])
	requireRemoved(t, s, ids[1])
	require.Equal(t, history.StatusCompleted, getTask(t, s, ids[2]).Status, "the newest is left for the next batch")
}

// startKeyed starts (or finds) a default task with key and input, through
// TaskStart or, with many, TaskStartMany, refusing the key's reuse when
// refuse is set.
func startKeyed(t *testing.T, s store.Store, key, input string, refuse, many bool) (store.TaskStartResult, error) {
	t.Helper()
	p := spec{IdempotencyKey: key, Input: json.RawMessage(input)}.params()
	p.RefuseKeyReuse = refuse
	if !many {
		return s.TaskStart(testContext(t), p)
	}
	res, err := s.TaskStartMany(testContext(t), []*store.TaskStartParams{p, spec{}.params()})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return res[0], nil
}

func testRetiredKeyIsStillTaken(t *testing.T, s store.Store) {
	first, err := startKeyed(t, s, "order-1", `{"n": 1}`, false, false)
	require.NoError(t, err)
	complete(t, s, claimOne(t, s, "w", time.Minute))
	res, err := maintenance.RemoveFinished(testContext(t), s, &store.RemoveFinishedParams{
		Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Hour), Max: 10, KeysUntil: time.Now().Add(time.Hour),
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Tasks)
	requireRemoved(t, s, first.ID)

	for _, many := range []bool{false, true} {
		again, err := startKeyed(t, s, "order-1", `{"n":1}`, false, many)
		require.NoError(t, err)
		require.Equal(t, store.TaskStartResult{ID: first.ID, Existing: true}, again,
			"many=%v: a late duplicate start names the removed task", many)
		same, err := startKeyed(t, s, "order-1", `{ "n" : 1 }`, true, many)
		require.NoError(t, err, "many=%v: the same input, written otherwise, is the same start", many)
		require.Equal(t, first.ID, same.ID)
		_, err = startKeyed(t, s, "order-1", `{"n": 2}`, true, many)
		require.ErrorIs(t, err, store.ErrIdempotencyKeyReused, "many=%v: another input under a retired key is refused", many)
	}
	require.NoError(t, s.QueueSet(testContext(t), &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, MaxWaiting: 100}))
	bounded, err := startKeyed(t, s, "order-1", `{"n":1}`, false, false)
	require.NoError(t, err)
	require.Equal(t, store.TaskStartResult{ID: first.ID, Existing: true}, bounded, "through a bounded queue too")
	requireRemoved(t, s, first.ID)
}

func testKeyFreedWithoutRetirement(t *testing.T, s store.Store) {
	first, err := startKeyed(t, s, "order-2", `{}`, false, false)
	require.NoError(t, err)
	complete(t, s, claimOne(t, s, "w", time.Minute))
	require.Equal(t, 1, removeFinished(t, s, time.Now().Add(time.Hour), 10).Tasks)
	again, err := startKeyed(t, s, "order-2", `{}`, false, false)
	require.NoError(t, err)
	require.False(t, again.Existing, "without a key window the key is free again")
	require.NotEqual(t, first.ID, again.ID)

	complete(t, s, claimOne(t, s, "w", time.Minute))
	_, err = maintenance.RemoveFinished(testContext(t), s, &store.RemoveFinishedParams{
		Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Hour), Max: 10, KeysUntil: time.Now().Add(300 * time.Millisecond),
	})
	require.NoError(t, err)
	waitFor(t, "the retired key to expire", func() bool {
		res, err := startKeyed(t, s, "order-2", `{}`, false, false)
		require.NoError(t, err)
		return !res.Existing
	})
}

func testNamespaceSettings(t *testing.T, s store.Store) {
	ctx := testContext(t)
	list := func() []store.NamespaceConfig {
		t.Helper()
		got, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
		require.NoError(t, err)
		return got
	}
	require.Empty(t, list(), "no settings and no finished task: no namespace to list")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "tenant-b", Retention: 30 * 24 * time.Hour}))
	first := start(t, s, spec{})
	require.Equal(t, []store.NamespaceConfig{{Name: "tenant-b", Retention: 30 * 24 * time.Hour}}, list(),
		"a namespace whose tasks have not finished is not listed without settings")
	complete(t, s, claimOne(t, s, "w", time.Minute))
	start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "tenant-b", Retention: 90 * time.Second, KeyRetention: time.Hour}))
	oldest := *getTask(t, s, first).FinishedAt
	require.Equal(t, []store.NamespaceConfig{
		{Name: store.DefaultNamespace, OldestFinished: oldest},
		{Name: "tenant-b", Retention: 90 * time.Second, KeyRetention: time.Hour},
	}, list(), "settings are replaced; a namespace with finished tasks is listed with the defaults and its oldest finished task")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "tenant-b", Retention: 90 * time.Second, KeyRetention: time.Hour}),
		"OldestFinished is not a setting: NamespaceSetParams has none")
	require.True(t, list()[1].OldestFinished.IsZero())
	only, err := s.NamespaceList(ctx, &store.NamespaceListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Equal(t, list()[1:], only, "one namespace listed alone")
	only, err = s.NamespaceList(ctx, &store.NamespaceListParams{Namespace: "nowhere"})
	require.NoError(t, err)
	require.Empty(t, only)
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "tenant-b", Archive: "s3://bucket/cairn?endpoint=127.0.0.1:9000"}))
	require.Equal(t, store.NamespaceConfig{Name: "tenant-b", Archive: "s3://bucket/cairn?endpoint=127.0.0.1:9000"}, list()[1])

	for _, bad := range []store.NamespaceConfig{
		{Name: ""}, {Name: "x", Retention: -time.Second}, {Name: "x", KeyRetention: -1}, {Name: "x", Retention: time.Microsecond},
		{Name: "x", Archive: "file:///a\nb"},
	} {
		require.Error(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: bad.Name, Retention: bad.Retention,
			KeyRetention: bad.KeyRetention, Archive: bad.Archive}), "%+v is refused", bad)
	}
	require.Len(t, list(), 2, "a refused setting writes nothing")
}

// TaskRemovableList names what a removal would take, oldest first, without
// taking it; a removal with Only takes only the tasks named, each only at
// the last seq given: a task that changed since it was read (archived) is
// kept.
func testRemoveOnly(t *testing.T, s store.Store) {
	ctx := testContext(t)
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, start(t, s, spec{}))
		complete(t, s, claimOne(t, s, "w", time.Minute))
	}
	start(t, s, spec{}) // pending: never listed
	p := &store.RemoveFinishedParams{Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Hour), Max: 10}
	listed, err := removableIDs(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, ids, listed, "the finished tasks, oldest first")
	p.Max = 2
	listed, err = removableIDs(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, ids[:2], listed)
	require.Len(t, events(t, s, ids[0]), len(events(t, s, ids[1])), "listing removed nothing")
	_, err = s.TaskRemovableList(ctx, &store.TaskRemovableListParams{Before: p.Before, Max: 10})
	require.Error(t, err, "the namespace is required")

	// Locked, in the transaction that would remove them: the same tasks,
	// with what their removal retires.
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	locked, err := tx.TaskRemovableList(ctx, &store.TaskRemovableListParams{Namespace: store.DefaultNamespace, Before: p.Before, Max: 2, Lock: true})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Len(t, locked, 2)
	for i, r := range locked {
		require.Equal(t, store.RemovableTask{ID: ids[i], Type: defaultType}, r, "a task without a key has no digest")
	}

	last := func(id uuid.UUID) int64 { evs := events(t, s, id); return evs[len(evs)-1].Seq }
	p.Max = 10
	p.Only = map[uuid.UUID]int64{ids[0]: last(ids[0]), ids[1]: last(ids[1]) - 1}
	res, err := maintenance.RemoveFinished(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tasks, "only the task named at its last seq")
	requireRemoved(t, s, ids[0])
	require.NotNil(t, getTask(t, s, ids[1]), "a task whose log moved past the seq named is kept")
	require.NotNil(t, getTask(t, s, ids[2]), "a task not named is kept")
}
