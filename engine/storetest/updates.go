package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// updateTests: updates accepted for tasks (requests.AcceptUpdate, over the
// store's statements), fenced on the history their validator saw, and
// their outcomes recorded by the attempt that applied them.
var updateTests = []conformanceTest{
	{"UpdateIsAppendedAndWakesAWait", testUpdateWakesWait},
	{"UpdateValidatedOnAnOlderHistoryWritesNothing", testUpdateMoved},
	{"UpdateWithSeenIDWritesNothing", testUpdateSeenID},
	{"UpdateToFinishedTaskIsRefused", testUpdateFinished},
	{"UpdateLeavesATaskNotStartedAsItIs", testUpdateNotStarted},
	{"UpdateOutcomeIsFencedByTheLease", testUpdateCompletedFenced},
}

// acceptUpdate appends the update id (named reassign, with args) to task
// id of the default namespace, validated on the history up to seen.
func acceptUpdate(t *testing.T, s store.Store, id uuid.UUID, seen int64, updateID, args string) (requests.UpdateResult, error) {
	t.Helper()
	return requests.AcceptUpdate(testContext(t), s, &requests.UpdateParams{
		Namespace: store.DefaultNamespace, TaskID: id, Seen: seen,
		Accepted: history.UpdateAcceptedData{UpdateID: updateID, Name: "reassign", Args: json.RawMessage(args), RequestedBy: "ops"},
	})
}

func testUpdateWakesWait(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	_, st := waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	require.Empty(t, claim(t, s, claimParams("w2", 10, time.Minute)), "a waiting task is not claimable")

	res, err := acceptUpdate(t, s, id, st.LastSeq, "u-1", `"bob"`)
	require.NoError(t, err)
	require.False(t, res.Existing)
	require.Equal(t, st.LastSeq+1, res.State.LastSeq)
	require.Len(t, res.State.PendingUpdates(), 1)
	require.NotNil(t, res.State.Wait, "the wait stands: the update does not end it")
	task := getTask(t, s, id)
	require.Equal(t, res.State.RunAt, task.RunAt)
	require.False(t, task.RunAt.After(time.Now()), "due at once")
	evs := events(t, s, id)
	got := evs[len(evs)-1]
	require.Zero(t, got.Attempt, "an update belongs to no attempt")
	requireJSONEqual(t, json.RawMessage(`"bob"`), got.Data.(history.UpdateAcceptedData).Args)

	// The run that applies it records the outcome, and waits again.
	ct := claimWhenDue(t, s, claimParams("w2", 10, time.Minute))
	require.Equal(t, id, ct.Task.ID)
	require.Len(t, ct.State.PendingUpdates(), 1, "the claim's state holds the update")
	next, err := appendFenced(t, s, ct,
		history.UpdateCompletedData{UpdateID: "u-1", Output: json.RawMessage(`"alice"`), At: history.UpdatePoint{Call: 1, Step: 0}},
		history.WaitStartedData{Name: "approval", Position: 0, Deadline: st.Wait.Deadline})
	require.NoError(t, err)
	require.Empty(t, next.PendingUpdates())
	require.Equal(t, history.StatusPending, next.Status)
	require.True(t, getTask(t, s, id).RunAt.After(time.Now()), "waits to its deadline again")
}

func testUpdateMoved(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	_, st := waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	before := events(t, s, id)
	_, err := acceptUpdate(t, s, id, st.LastSeq-1, "u-1", `"bob"`)
	require.ErrorIs(t, err, requests.ErrUpdateMoved)
	_, err = acceptUpdate(t, s, id, st.LastSeq+1, "u-1", `"bob"`)
	require.ErrorIs(t, err, requests.ErrUpdateMoved)
	require.Equal(t, before, events(t, s, id))
}

func testUpdateSeenID(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	_, st := waitForSignal(t, s, "approval", time.Now().Add(time.Hour))
	res, err := acceptUpdate(t, s, id, st.LastSeq, "u-1", `"bob"`)
	require.NoError(t, err)
	before := events(t, s, id)
	again, err := acceptUpdate(t, s, id, st.LastSeq, "u-1", `"carol"`)
	require.NoError(t, err, "an id already accepted is found whatever was seen")
	require.True(t, again.Existing)
	require.Equal(t, res.State.LastSeq, again.State.LastSeq)
	require.Equal(t, before, events(t, s, id))
}

func testUpdateFinished(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	st := complete(t, s, claimOne(t, s, "w", time.Minute))
	before := events(t, s, id)
	_, err := acceptUpdate(t, s, id, st.LastSeq, "u-1", `"bob"`)
	require.ErrorIs(t, err, store.ErrTaskState)
	require.Equal(t, before, events(t, s, id))
	_, err = acceptUpdate(t, s, uuid.New(), 1, "u-1", "")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testUpdateNotStarted(t *testing.T, s store.Store) {
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	id := start(t, s, spec{RunAt: runAt})
	res, err := acceptUpdate(t, s, id, 1, "u-1", "")
	require.NoError(t, err)
	require.True(t, res.State.RunAt.Equal(runAt), "not started early: its first run applies the update")
	require.True(t, getTask(t, s, id).RunAt.Equal(runAt))
}

func testUpdateCompletedFenced(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	res, err := acceptUpdate(t, s, id, ct.State.LastSeq, "u-1", "")
	require.NoError(t, err)
	require.Equal(t, history.StatusRunning, res.State.Status, "a running task keeps running")
	done := history.UpdateCompletedData{UpdateID: "u-1", Error: &history.ErrorInfo{Class: history.Permanent, Message: "no"}}
	stale := *ct
	stale.State.Lease.Epoch--
	_, err = appendFenced(t, s, &stale, done)
	require.Error(t, err, "a stale epoch records no outcome")
	ct.State = res.State
	_, err = appendFenced(t, s, ct, done)
	require.NoError(t, err)
	_, err = appendFenced(t, s, ct, done)
	require.Error(t, err, "an outcome is recorded once")
}
