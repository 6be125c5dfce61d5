package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// selectTests: the wait of a workflow.Select (wait_started with select),
// which a signal of any of its names or the end of any of its children
// ends, and its decision (select_matched), after which it wakes the task
// no more.
var selectTests = []conformanceTest{
	{"SelectWaitEndsAtASignalOfAnyOfItsNames", testSelectWaitSignal},
	{"SelectWaitEndsAtTheEndOfAnyOfItsChildren", testSelectWaitChild},
}

// selectWait ends the parent's attempt in a select over the signals a and
// b, its child 0 and a timer of an hour.
func selectWait(t *testing.T, s store.Store, parent *store.ClaimedTask) history.State {
	t.Helper()
	st, err := appendFenced(t, s, parent, history.WaitStartedData{Position: 0, Deadline: time.Now().Add(time.Hour),
		Select: &history.SelectWait{Signals: []string{"a", "b"}, Children: []int{0}}})
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, st.Status)
	require.NotNil(t, st.Wait)
	require.Empty(t, claim(t, s, parentClaim()), "not due before one of its cases")
	return st
}

// signalAsReplay sends the signal name to id and checks the state it was
// decided on agrees with the replay of the history.
func signalAsReplay(t *testing.T, s store.Store, id uuid.UUID, name string) store.SignalResult {
	t.Helper()
	res, err := signal(t, s, id, name, `{"n":1}`, "")
	require.NoError(t, err)
	want := stateOf(t, s, id)
	require.Equal(t, want.LastSeq, res.State.LastSeq)
	require.Equal(t, want.RunAt, res.State.RunAt)
	require.Equal(t, want.Wait, res.State.Wait)
	return res
}

func testSelectWaitSignal(t *testing.T, s store.Store) {
	parent, _ := startChildren(t, s, 1)
	id := parent.Task.ID
	selectWait(t, s, parent)
	require.NotNil(t, signalAsReplay(t, s, id, "c").State.Wait, "a name it does not select leaves the wait")
	res := signalAsReplay(t, s, id, "b")
	require.Nil(t, res.State.Wait, "one of its names ends the wait")
	require.False(t, res.State.RunAt.After(time.Now()), "due at once")
	require.Nil(t, signalAsReplay(t, s, id, "a").State.Wait)

	// The next attempt decides (case 1, signal b) and sleeps: a signal of
	// the select's other name must not wake it early.
	claimed := claim(t, s, parentClaim())
	require.Len(t, claimed, 1)
	ct := claimed[0]
	b := stateOf(t, s, id).Signals[1]
	require.Equal(t, "b", b.Name)
	fireAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond) // as the runtime writes times
	_, err := appendFenced(t, s, ct, history.SelectMatchedData{Position: 0, Case: 1, Kind: history.SelectSignal, Name: "b", Seq: b.Seq},
		history.TimerStartedData{Position: 0, FireAt: fireAt})
	require.NoError(t, err)
	res = signalAsReplay(t, s, id, "a")
	require.Nil(t, res.State.Wait, "the decided select waits no more")
	require.True(t, res.State.RunAt.After(time.Now().Add(time.Minute)), "the sleeping task stays asleep")
	require.Empty(t, claim(t, s, parentClaim()))
}

func testSelectWaitChild(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 1)
	id := parent.Task.ID
	selectWait(t, s, parent)

	child := claimOne(t, s, "w", time.Minute)
	require.Equal(t, res.IDs[0], child.Task.ID)
	complete(t, s, child)
	ps := stateOf(t, s, id)
	require.Nil(t, ps.Wait, "its child's end ends the wait")
	require.False(t, ps.RunAt.After(time.Now()), "due at once")
	require.Nil(t, signalAsReplay(t, s, id, "a").State.Wait, "the wait ended: a signal finds none")

	claimed := claim(t, s, parentClaim())
	require.Len(t, claimed, 1)
	ct := claimed[0]
	_, err := appendFenced(t, s, ct, history.SelectMatchedData{Position: 0, Case: 2, Kind: history.SelectChild, Child: 0, Seq: ps.Children[0].FinishedSeq})
	require.NoError(t, err)
	require.Equal(t, []history.SelectMatch{{Position: 0, Case: 2, Kind: history.SelectChild, Child: 0, Seq: ps.Children[0].FinishedSeq}},
		stateOf(t, s, id).Selects)
}
