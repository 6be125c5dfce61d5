package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// continueTests: a run continued as new (requests.ContinueAsNew, over the
// driver's statements): the next run's start and the run's task_continued
// together, or neither.
var continueTests = []conformanceTest{
	{"ContinueAsNewStartsTheNextRunAndEndsTheRun", testContinueAsNew},
	{"ContinueAsNewFencedWritesNothing", testContinueAsNewFenced},
	{"ContinueAsNewAfterACancelRequestWritesNothing", testContinueAsNewAfterCancel},
	{"ContinuedChildReportsFromItsLastRunOnly", testContinuedChildReports},
	{"RemoveFinishedRemovesContinuedRuns", testRemoveContinuedRuns},
	{"ContinuedRunErasedStillLeadsToItsNextRun", testContinuedRunErased},
	{"CancelOfARunThatKeepsContinuingIsAConflict", testCancelKeepsContinuing},
}

// continueParams continues claimed run ct with the next run's start.
func continueParams(ct *store.ClaimedTask) *store.ContinueParams {
	sc := ct.State.Scheduled
	next := history.TaskScheduledData{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Priority: sc.Priority,
		RunAt: time.Now(), MaxAttempts: sc.MaxAttempts, Labels: sc.Labels,
		ParentID: sc.ParentID, ParentPosition: sc.ParentPosition, ContinuedFrom: ct.Task.ID.String(),
	}
	return &store.ContinueParams{
		Run:  store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt},
		Next: store.TaskStartParams{Namespace: ct.Task.Namespace, Scheduled: next},
	}
}

func testContinueAsNew(t *testing.T, s store.Store) {
	run := start(t, s, spec{Priority: 3, Labels: map[string]string{"team": "ap"}})
	ct := claimOne(t, s, "w", time.Minute)
	p := continueParams(ct)
	p.Run.Payloads = []history.Payload{history.StepCompletedData{Position: 0, Name: "poll"}}
	res, err := requests.ContinueAsNew(testContext(t), s, p)
	require.NoError(t, err)
	require.Equal(t, history.StatusContinued, res.State.Status)
	require.Equal(t, res.NextID.String(), res.State.ContinuedAs)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.TaskContinued},
		eventTypes(t, s, run))
	task := getTask(t, s, run)
	require.Equal(t, history.StatusContinued, task.Status)
	require.NotNil(t, task.FinishedAt)

	next := getTask(t, s, res.NextID)
	require.Equal(t, history.StatusPending, next.Status)
	require.Equal(t, 3, next.Priority)
	require.Equal(t, map[string]string{"team": "ap"}, next.Labels)
	require.Empty(t, next.IdempotencyKey)
	require.Equal(t, run.String(), stateOf(t, s, res.NextID).Scheduled.ContinuedFrom)
	latest, err := requests.LatestRun(testContext(t), s, store.DefaultNamespace, run)
	require.NoError(t, err)
	require.Equal(t, res.NextID, latest.ID)
	again := claimOne(t, s, "w", time.Minute)
	require.Equal(t, res.NextID, again.Task.ID, "the next run is due at once")
}

func testContinueAsNewFenced(t *testing.T, s store.Store) {
	run := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	p := continueParams(ct)
	p.Run.Epoch++ // an epoch the run never had
	_, err := requests.ContinueAsNew(testContext(t), s, p)
	requireIs(t, err, store.ErrFenced)
	require.Equal(t, []uuid.UUID{run}, allTaskIDs(t, s), "no next run was started")
	require.Equal(t, history.StatusRunning, getTask(t, s, run).Status)
}

func testContinueAsNewAfterCancel(t *testing.T, s store.Store) {
	run := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := requests.Cancel(testContext(t), s, &requests.Params{Namespace: store.DefaultNamespace, ID: run, By: "ops"})
	require.NoError(t, err)
	_, err = requests.ContinueAsNew(testContext(t), s, continueParams(ct))
	requireIs(t, err, store.ErrConflict)
	require.Equal(t, []uuid.UUID{run}, allTaskIDs(t, s), "no next run was started")
	// On the state with the cancel, the continue is no valid history.
	p := continueParams(ct)
	p.Run.State = stateOf(t, s, run)
	_, err = requests.ContinueAsNew(testContext(t), s, p)
	require.ErrorContains(t, err, "the task's cancel was requested")
	require.Equal(t, []uuid.UUID{run}, allTaskIDs(t, s), "no next run was started")
}

func testContinuedChildReports(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 1)
	awaitChildren(t, s, parent, 0)
	child := claimOne(t, s, "w", time.Minute)
	require.Equal(t, res.IDs[0], child.Task.ID)
	cont, err := requests.ContinueAsNew(testContext(t), s, continueParams(child))
	require.NoError(t, err)
	ps := stateOf(t, s, parent.Task.ID)
	require.False(t, ps.Children[0].Finished, "a continued run does not report")
	require.Equal(t, history.StatusPending, ps.Status)
	require.NotNil(t, ps.ChildWait, "the parent still awaits its child")

	last := claimOne(t, s, "w", time.Minute)
	require.Equal(t, cont.NextID, last.Task.ID)
	require.Equal(t, parent.Task.ID, last.Task.ParentID, "the next run keeps the parent")
	complete(t, s, last)
	ps = stateOf(t, s, parent.Task.ID)
	c := ps.Children[0]
	require.True(t, c.Finished)
	require.Equal(t, history.StatusCompleted, c.Status)
	require.Equal(t, res.IDs[0].String(), c.ID, "the parent knows the child by its first run")
	require.Equal(t, cont.NextID.String(), c.RunID, "the run that ended")
	requireJSONEqual(t, completedOutput, c.Output)
	require.Nil(t, ps.ChildWait)
}

func testRemoveContinuedRuns(t *testing.T, s store.Store) {
	run := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := requests.ContinueAsNew(testContext(t), s, continueParams(ct))
	require.NoError(t, err)
	p := &store.RemoveFinishedParams{Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Minute), Max: 10}
	ids, err := removableIDs(testContext(t), s, p)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{run}, ids, "the continued run, not the pending next")
}

func testContinuedRunErased(t *testing.T, s store.Store) {
	ctx := testContext(t)
	p := spec{}.params()
	p.ID, p.DataKey = uuid.Must(uuid.NewV7()), []byte("wrapped")
	_, err := s.TaskStart(ctx, p)
	require.NoError(t, err)
	run := p.ID
	ct := claimOne(t, s, "w", time.Minute)
	res, err := requests.ContinueAsNew(ctx, s, continueParams(ct))
	require.NoError(t, err)
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: run, State: res.State, At: time.Now(),
		Payloads: []history.Payload{history.TaskErasedData{By: "dpo"}}})
	require.NoError(t, err, "a continued run is finished, so it may be erased")

	latest, err := requests.LatestRun(ctx, s, store.DefaultNamespace, run)
	require.NoError(t, err)
	require.Equal(t, res.NextID, latest.ID, "task_erased after task_continued")
	cancelled, err := requests.Cancel(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: run, By: "ops"})
	require.NoError(t, err)
	require.Equal(t, history.StatusCancelled, cancelled.State.Status, "the cancel reached the next run")
	require.Equal(t, history.StatusCancelled, getTask(t, s, res.NextID).Status)
}

// staleRow is s with task id's row read as if it were still running: a
// chain whose current run continues as new between each read of its row
// and the cancel's read of its history.
type staleRow struct {
	store.Store
	id uuid.UUID
}

func (s staleRow) TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error) {
	t, err := s.Store.TaskGet(ctx, p)
	if err == nil && t.ID == s.id {
		stale := *t
		stale.Status = history.StatusRunning
		t = &stale
	}
	return t, err
}

func testCancelKeepsContinuing(t *testing.T, s store.Store) {
	run := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	res, err := requests.ContinueAsNew(testContext(t), s, continueParams(ct))
	require.NoError(t, err)
	_, err = requests.Cancel(testContext(t), staleRow{Store: s, id: run}, &requests.Params{Namespace: store.DefaultNamespace, ID: run, By: "ops"})
	requireIs(t, err, store.ErrConflict)
	require.ErrorContains(t, err, "kept continuing as new")
	require.Equal(t, history.StatusPending, getTask(t, s, res.NextID).Status, "nothing was cancelled")
}
