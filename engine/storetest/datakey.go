package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// dataKeyTests: tasks' wrapped data keys (encryption at rest), kept on
// their rows and destroyed by task_erased.
var dataKeyTests = []conformanceTest{
	{"DataKeysAreWrittenWithTheStartAndReadBack", testDataKeyStart},
	{"DataKeySetGivesAKeyOnlyToAnUnfinishedTaskWithout", testDataKeySet},
	{"TaskErasedDestroysTheDataKeyInTheSameWrite", testDataKeyErased},
}

func testDataKeyStart(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id, err := uuid.NewV7()
	require.NoError(t, err)
	p := spec{IdempotencyKey: "k"}.params()
	p.ID, p.DataKey = id, []byte("ck1:k1:\x00\x01wrapped\xff")
	res, err := s.TaskStart(ctx, p)
	require.NoError(t, err)
	require.Equal(t, id, res.ID, "the start's own id")

	again := spec{IdempotencyKey: "k"}.params()
	other, err := uuid.NewV7()
	require.NoError(t, err)
	again.ID, again.DataKey = other, []byte("another key")
	res, err = s.TaskStart(ctx, again)
	require.NoError(t, err)
	require.True(t, res.Existing)
	require.Equal(t, id, res.ID)

	plain := start(t, s, spec{})
	batch := []*store.TaskStartParams{spec{}.params(), spec{}.params()}
	for i, b := range batch {
		b.ID = uuid.Must(uuid.NewV7())
		b.DataKey = []byte{byte('a' + i)}
	}
	started, err := s.TaskStartMany(ctx, batch)
	require.NoError(t, err)

	ids := []uuid.UUID{id, other, plain, started[0].ID, started[1].ID, uuid.Must(uuid.NewV7())}
	keys, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{IDs: ids})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID][]byte{id: p.DataKey, started[0].ID: []byte("a"), started[1].ID: []byte("b")}, keys,
		"a deduplicated start writes no key, nor one without a key; the bytes come back as written")
	inNamespace, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: store.DefaultNamespace, IDs: ids})
	require.NoError(t, err)
	require.Equal(t, keys, inNamespace, "the tasks are in the namespace read")
	elsewhere, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: "tenant-b", IDs: ids})
	require.NoError(t, err)
	require.Empty(t, elsewhere, "another namespace's read finds none of them")
	none, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{})
	require.NoError(t, err)
	require.Empty(t, none)
}

func testDataKeySet(t *testing.T, s store.Store) {
	ctx := testContext(t)
	finished := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	require.Equal(t, finished, ct.Task.ID)
	complete(t, s, ct)
	without := start(t, s, spec{})
	held, err := s.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: without, DataKey: []byte("first")})
	require.NoError(t, err)
	require.Equal(t, []byte("first"), held)
	held, err = s.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: without, DataKey: []byte("second")})
	require.NoError(t, err)
	require.Equal(t, []byte("first"), held, "a task keeps the key it has")

	held, err = s.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: finished, DataKey: []byte("late")})
	require.NoError(t, err)
	require.Nil(t, held, "a finished task without a key gets none")
	held, err = s.TaskDataKeySet(ctx, &store.TaskDataKeySetParams{ID: uuid.Must(uuid.NewV7()), DataKey: []byte("x")})
	require.NoError(t, err)
	require.Nil(t, held, "nor does a task that does not exist")
}

func testDataKeyErased(t *testing.T, s store.Store) {
	ctx := testContext(t)
	p := spec{}.params()
	p.ID, p.DataKey = uuid.Must(uuid.NewV7()), []byte("wrapped")
	res, err := s.TaskStart(ctx, p)
	require.NoError(t, err)
	ct := claimOne(t, s, "w", time.Minute)
	_, err = appendFenced(t, s, ct, history.TaskErasedData{By: "dpo"})
	require.ErrorIs(t, err, history.ErrInvalidHistory, "a running task is not erased")
	state := complete(t, s, ct)

	next, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: res.ID, State: state, At: time.Now(),
		Payloads: []history.Payload{history.TaskErasedData{By: "dpo", Reason: "request 1"}}})
	require.NoError(t, err)
	require.True(t, next.Erased)
	require.Equal(t, history.StatusCompleted, next.Status)
	keys, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: store.DefaultNamespace, IDs: []uuid.UUID{res.ID}})
	require.NoError(t, err)
	require.Empty(t, keys, "the key is gone with the event")
	evs := events(t, s, res.ID)
	require.Equal(t, history.TaskErasedData{By: "dpo", Reason: "request 1"}, evs[len(evs)-1].Data)

	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: res.ID, State: next, At: time.Now(),
		Payloads: []history.Payload{history.CompensationRequestedData{By: "ops"}}})
	require.ErrorIs(t, err, history.ErrInvalidHistory, "an erased task is not reopened")
}
