package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// childTests: child workflows started by a parent (requests.StartChildren,
// over the driver's statements) and the child_finished their terminal
// appends write into the parent.
var childTests = []conformanceTest{
	{"StartChildrenWritesChildrenAndChildStartedTogether", testStartChildren},
	{"StartChildrenFencedWritesNothing", testStartChildrenFenced},
	{"ChildEndReportsToItsAwaitingParent", testChildReportsToParent},
	{"ChildrenEndingInOneBatchReportInOneAppend", testChildrenReportInOneBatch},
	{"ChildEndInABatchNamingItTwiceReportsOnce", testChildEndNamedTwiceReportsOnce},
	{"FailedChildReportsItsEvidence", testFailedChildReports},
	{"ChildOfFinishedParentReportsNothing", testChildOfFinishedParent},
	{"SquattedChildKeyIsRefusedNotAdopted", testSquattedChildKey},
}

const parentType = "parent"

// startChildren claims a parent of type parentType and starts n children
// of the default type under its attempt's lease.
func startChildren(t *testing.T, s store.Executor, n int) (*store.ClaimedTask, store.ChildStartResult) {
	t.Helper()
	start(t, s, spec{Type: parentType})
	claimed := claim(t, s, parentClaim())
	require.Len(t, claimed, 1)
	parent := claimed[0]
	children := make([]store.ChildStart, n)
	for i := range children {
		children[i] = store.ChildStart{Task: *spec{Input: json.RawMessage(`{"page":1}`)}.params()}
	}
	res, err := startChildrenOn(testContext(t), s, &store.ChildStartParams{
		Parent:   store.EventAppendParams{TaskID: parent.Task.ID, State: parent.State, Epoch: parent.State.Lease.Epoch, Attempt: parent.State.Attempt},
		Children: children,
	})
	require.NoError(t, err)
	parent.State = res.State
	return parent, res
}

// startChildrenOn starts children over s as the runtime does
// ([requests.StartChildren]); under the payload codecs, with their inputs
// encoded first, as the SDK's edge encodes them.
func startChildrenOn(ctx context.Context, s store.Executor, p *store.ChildStartParams) (store.ChildStartResult, error) {
	if enc, ok := s.(*encodedStore); ok {
		return enc.startChildren(ctx, p)
	}
	return requests.StartChildren(ctx, s, p)
}

// parentClaim claims one task of type parentType.
func parentClaim() *store.TaskClaimParams {
	p := claimParams("w", 1, time.Minute)
	p.Types = []store.TypeKey{{Type: parentType, Version: 1}}
	return p
}

// awaitChildren ends the parent's attempt awaiting the children at
// positions.
func awaitChildren(t *testing.T, s store.Executor, parent *store.ClaimedTask, positions ...int) history.State {
	t.Helper()
	st, err := appendFenced(t, s, parent, history.ChildWaitStartedData{Positions: positions})
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, st.Status)
	return st
}

func testStartChildren(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 2)
	require.Len(t, res.IDs, 2)
	require.Len(t, res.State.Children, 2)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.ChildStarted, history.ChildStarted},
		eventTypes(t, s, parent.Task.ID))
	for pos, id := range res.IDs {
		c := res.State.Children[pos]
		require.Equal(t, id.String(), c.ID)
		require.Equal(t, defaultType, c.TaskType)
		task := getTask(t, s, id)
		require.Equal(t, parent.Task.ID, task.ParentID)
		require.Equal(t, pos, task.ParentPosition)
		require.NotEmpty(t, task.IdempotencyKey, "a child's key comes from its parent and position")
		sc := stateOf(t, s, id).Scheduled
		require.Equal(t, parent.Task.ID.String(), sc.ParentID, "the child's task_scheduled names its parent")
		require.Equal(t, pos, sc.ParentPosition)
	}
	require.NotEqual(t, getTask(t, s, res.IDs[0]).IdempotencyKey, getTask(t, s, res.IDs[1]).IdempotencyKey)
}

// testSquattedChildKey replays finding F4 behind the edge: a task started
// with the idempotency key a parent's child 0 will have (the edge refuses
// the key's cairn: prefix) is not adopted as that child: the start fails,
// marked ErrIdempotencyKeyReused, and writes nothing.
func testSquattedChildKey(t *testing.T, s store.Store) {
	start(t, s, spec{Type: parentType})
	claimed := claim(t, s, parentClaim())
	require.Len(t, claimed, 1)
	parent := claimed[0]
	squatter := start(t, s, spec{IdempotencyKey: fmt.Sprintf("cairn:child:%s:0", parent.Task.ID)})
	before := len(allTaskIDs(t, s))
	_, err := startChildrenOn(testContext(t), s, &store.ChildStartParams{
		Parent:   store.EventAppendParams{TaskID: parent.Task.ID, State: parent.State, Epoch: parent.State.Lease.Epoch, Attempt: parent.State.Attempt},
		Children: []store.ChildStart{{Task: *spec{}.params()}},
	})
	requireIs(t, err, store.ErrIdempotencyKeyReused)
	require.ErrorContains(t, err, "not this parent's child")
	require.Len(t, allTaskIDs(t, s), before, "no child was created")
	require.Empty(t, stateOf(t, s, parent.Task.ID).Children, "the parent adopted nothing")
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted}, eventTypes(t, s, parent.Task.ID))
	require.Equal(t, uuid.Nil, getTask(t, s, squatter).ParentID, "the squatter is no one's child")
}

func testStartChildrenFenced(t *testing.T, s store.Store) {
	parent, _ := startChildren(t, s, 1)
	before := len(allTaskIDs(t, s))
	stale := parent.State
	stale.Lease.Epoch-- // an attempt the task has moved past
	_, err := startChildrenOn(testContext(t), s, &store.ChildStartParams{
		Parent:   store.EventAppendParams{TaskID: parent.Task.ID, State: stale, Epoch: stale.Lease.Epoch + 5, Attempt: stale.Attempt},
		Children: []store.ChildStart{{Task: *spec{}.params()}},
	})
	requireIs(t, err, store.ErrFenced)
	require.Len(t, allTaskIDs(t, s), before, "no child was created")
	require.Len(t, stateOf(t, s, parent.Task.ID).Children, 1)
}

func testChildReportsToParent(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 1)
	st := awaitChildren(t, s, parent, 0)
	require.True(t, st.RunAt.Equal(history.Never), "a parent awaiting a child is due at no time of its own")
	require.Empty(t, claim(t, s, parentClaim()), "the parent is not due while its child runs")

	child := claimOne(t, s, "w", time.Minute)
	require.Equal(t, res.IDs[0], child.Task.ID)
	complete(t, s, child)

	ps := stateOf(t, s, parent.Task.ID)
	require.Equal(t, history.StatusPending, ps.Status)
	require.Nil(t, ps.ChildWait, "the child it awaited finished")
	require.False(t, ps.RunAt.After(time.Now()), "due at once")
	require.True(t, ps.Children[0].Finished)
	require.Equal(t, history.StatusCompleted, ps.Children[0].Status)
	requireJSONEqual(t, completedOutput, ps.Children[0].Output)
	last := events(t, s, parent.Task.ID)
	require.Equal(t, history.ChildFinished, last[len(last)-1].Type())
	require.Zero(t, last[len(last)-1].Attempt, "child_finished belongs to no attempt of the parent")
	require.Len(t, claim(t, s, parentClaim()), 1, "the parent is claimable again")
}

func testChildrenReportInOneBatch(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 3)
	awaitChildren(t, s, parent, 0, 1, 2)
	claimed := claim(t, s, claimParams("w", 3, time.Minute))
	require.Len(t, claimed, 3)
	ps := make([]*store.EventAppendParams, len(claimed))
	for i, ct := range claimed {
		ps[i] = &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
			Payloads: []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`)}}}
	}
	out, err := s.EventAppendMany(testContext(t), ps)
	require.NoError(t, err)
	for _, r := range out {
		require.NoError(t, r.Err)
	}
	evs := events(t, s, parent.Task.ID)
	var finished []int
	for _, e := range evs {
		if f, ok := e.Data.(history.ChildFinishedData); ok {
			finished = append(finished, f.Position)
		}
	}
	require.Equal(t, []int{0, 1, 2}, finished, "each child reported once, in position order")
	for pos, id := range res.IDs {
		require.Equal(t, id.String(), stateOf(t, s, parent.Task.ID).Children[pos].ID)
	}
}

func testFailedChildReports(t *testing.T, s store.Store) {
	parent, _ := startChildren(t, s, 1)
	awaitChildren(t, s, parent, 0)
	child := claimOne(t, s, "w", time.Minute)
	info := history.ErrorInfo{Class: history.Permanent, Message: "page unreadable", Kind: "ocr_failed", Step: "ocr", Position: 0}
	_, err := appendFenced(t, s, child, history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info})
	require.NoError(t, err)
	c := stateOf(t, s, parent.Task.ID).Children[0]
	require.Equal(t, history.StatusFailed, c.Status)
	require.NotNil(t, c.Error)
	require.Equal(t, "page unreadable", c.Error.Message)
	require.Equal(t, "ocr_failed", c.Error.Kind)
	require.Empty(t, c.Output)
}

func testChildOfFinishedParent(t *testing.T, s store.Store) {
	parent, _ := startChildren(t, s, 1)
	_, err := appendFenced(t, s, parent, history.TaskCompletedData{})
	require.NoError(t, err)
	before := len(events(t, s, parent.Task.ID))
	complete(t, s, claimOne(t, s, "w", time.Minute))
	require.Len(t, events(t, s, parent.Task.ID), before, "a finished parent's log is final")
}

// testChildEndNamedTwiceReportsOnce: a batch naming a child twice (its
// stale attempt's end and its current attempt's), beside another child's
// end, writes each end in turn; the parent hears of each child once, from
// the append that was written.
func testChildEndNamedTwiceReportsOnce(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 2)
	awaitChildren(t, s, parent, 0, 1)
	claimed := claim(t, s, claimParams("w", 2, time.Minute))
	require.Len(t, claimed, 2)
	other, stale := claimed[0], claimed[1]
	_, err := appendFenced(t, s, stale, history.TaskReleasedData{WorkerID: "w", LeaseEpoch: stale.State.Lease.Epoch})
	require.NoError(t, err)
	current := claimWhenDue(t, s, claimParams("w", 1, time.Minute))
	require.Equal(t, stale.Task.ID, current.Task.ID)

	end := func(ct *store.ClaimedTask, output string) *store.EventAppendParams {
		return &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
			Payloads: []history.Payload{history.TaskCompletedData{Output: json.RawMessage(output)}}}
	}
	out, err := s.EventAppendMany(testContext(t), []*store.EventAppendParams{
		end(stale, `"stale"`), end(other, `"other"`), end(current, `"current"`),
	})
	require.NoError(t, err)
	requireIs(t, out[0].Err, store.ErrFenced)
	require.NoError(t, out[1].Err)
	require.NoError(t, out[2].Err)

	var finished []int
	for _, e := range events(t, s, parent.Task.ID) {
		if f, ok := e.Data.(history.ChildFinishedData); ok {
			finished = append(finished, f.Position)
		}
	}
	require.ElementsMatch(t, []int{0, 1}, finished, "each child reported once")
	ps := stateOf(t, s, parent.Task.ID)
	for pos, id := range res.IDs {
		want := `"other"`
		if id == current.Task.ID {
			want = `"current"`
		}
		require.True(t, ps.Children[pos].Finished)
		requireJSONEqual(t, json.RawMessage(want), ps.Children[pos].Output, "child %d", pos)
	}
	require.Equal(t, history.StatusPending, ps.Status, "both children it awaited finished")
	require.Equal(t, 3, requireReplayMatches(t, s))
}
