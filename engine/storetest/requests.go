package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// requestTests: requests on a task (cancel, compensate, requeue), dead
// letters and start deadlines.
var requestTests = []conformanceTest{
	{"CancelOfPendingTaskCancelsIt", testCancelPending},
	{"CancelOfRunningTaskRequestsIt", testCancelRunning},
	{"CancelRefusals", testCancelRefusals},
	{"CompensateCompletedTask", testCompensateCompleted},
	{"DeadLetteredTaskIsListedAndRequeued", testDeadLetterListAndRequeue},
	{"TaskRequeueRefusals", testRequeueRefusals},
	{"StartDeadlinePassedExpiresNeverClaimed", testStartDeadlineExpires},
}

func testCancelPending(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	res, err := requests.Cancel(testContext(t), s, &requests.Params{
		Namespace: store.DefaultNamespace, ID: id, By: "ops", Reason: "not needed",
	})
	require.NoError(t, err)
	require.False(t, res.AlreadyRequested)
	require.Equal(t, history.StatusCancelled, res.State.Status)

	task := getTask(t, s, id)
	require.Equal(t, history.StatusCancelled, task.Status, "a pending task is cancelled at once")
	require.True(t, task.CancelRequest)
	require.NotNil(t, task.FinishedAt)
	require.Equal(t, []history.Type{history.TaskScheduled, history.CancelRequested, history.TaskCancelled}, eventTypes(t, s, id))
	evs := events(t, s, id)
	require.Equal(t, history.CancelRequestedData{By: "ops", Reason: "not needed"}, evs[1].Data)
	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)), "a cancelled task never runs")
}

func testCancelRunning(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	req := &requests.Params{Namespace: store.DefaultNamespace, ID: id, By: "ops"}
	res, err := requests.Cancel(ctx, s, req)
	require.NoError(t, err)
	require.False(t, res.AlreadyRequested)
	require.Equal(t, history.StatusRunning, res.State.Status, "a running task stops at its next checkpoint")
	require.True(t, res.State.CancelRequested)

	task := getTask(t, s, id)
	require.Equal(t, history.StatusRunning, task.Status)
	require.True(t, task.CancelRequest)
	require.Equal(t, "w", task.LeaseOwner, "the worker keeps its lease")
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.CancelRequested}, eventTypes(t, s, id))

	again, err := requests.Cancel(ctx, s, req)
	require.NoError(t, err, "cancelling twice is not an error")
	require.True(t, again.AlreadyRequested)
	require.Equal(t, int64(3), getTask(t, s, id).LastSeq, "nothing appended the second time")

	// The worker learns of it from its heartbeat.
	held, err := s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: id, Epoch: ct.State.Lease.Epoch}}, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{id: {CancelRequested: true}}, held)

	// Its append from the state before the request conflicts; from the
	// current state it ends the task cancelled.
	_, err = appendFenced(t, s, ct, history.TaskCompletedData{})
	requireIs(t, err, store.ErrConflict)
	current := *ct
	current.State = stateOf(t, s, id)
	st, err := appendFenced(t, s, &current, history.TaskCancelledData{Reason: "cancel requested"})
	require.NoError(t, err)
	require.Equal(t, history.StatusCancelled, st.Status)
	require.Equal(t, history.StatusCancelled, getTask(t, s, id).Status)

	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: id, Epoch: ct.State.Lease.Epoch}}, TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, held, "a finished task's lease is gone")
}

func testCancelRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{Namespace: "tenant-a"})
	_, err := requests.Cancel(ctx, s, &requests.Params{Namespace: "tenant-a", ID: id})
	require.Error(t, err, "By is required")
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: "tenant-b", ID: id, By: "ops"})
	requireIs(t, err, store.ErrNotFound, "another namespace's task")
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: "tenant-a", ID: uuid.New(), By: "ops"})
	requireIs(t, err, store.ErrNotFound)
	task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "tenant-a", ID: id})
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, task.Status)
	require.False(t, task.CancelRequest)

	done := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: done, By: "ops"})
	requireIs(t, err, store.ErrTaskState, "a finished task is not cancelled")
	require.Equal(t, history.StatusCompleted, getTask(t, s, done).Status)
}

func testCompensateCompleted(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := appendFenced(t, s, ct,
		history.StepCompletedData{Position: 0, Name: "charge", Output: json.RawMessage(`"ch_1"`), Compensable: true},
		history.TaskCompletedData{Output: json.RawMessage(`"done"`)})
	require.NoError(t, err)

	st, err := requests.Compensate(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: id, By: "ops", Reason: "refund"})
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, st.Status, "due again, to undo its steps")
	require.NotNil(t, st.Compensation)
	require.Equal(t, history.CompensateRequested, st.Compensation.Reason)
	require.Equal(t, history.StatusPending, getTask(t, s, id).Status)
	evs := events(t, s, id)
	require.NotEmpty(t, evs)
	require.Equal(t, history.CompensationRequestedData{By: "ops", Reason: "refund"}, evs[len(evs)-1].Data)

	again := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, id, again.Task.ID)
	require.NotNil(t, again.State.Compensation, "the claim's state carries the request")

	// A task without compensable steps, and one not completed, are refused.
	plain := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	_, err = requests.Compensate(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: plain, By: "ops"})
	requireIs(t, err, store.ErrTaskState)
	pending := start(t, s, spec{RunAt: time.Now().Add(time.Hour)})
	_, err = requests.Compensate(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: pending, By: "ops"})
	requireIs(t, err, store.ErrTaskState)
}

// deadLetter claims task id and ends its attempt with a permanent failure
// that dead-letters it, as a worker does for a type that keeps its dead
// letters, and returns the evidence.
func deadLetter(t *testing.T, s store.Store, id uuid.UUID) history.ErrorInfo {
	t.Helper()
	ct := claimOne(t, s, "w1", time.Minute)
	require.Equal(t, id, ct.Task.ID)
	info := history.ErrorInfo{Class: history.Permanent, Message: "bad document", Status: 422}
	st, err := appendFenced(t, s, ct, history.AttemptFailedData{Error: info},
		history.TaskDeadLetteredData{Reason: "permanent error (attempt 1)", Error: info})
	require.NoError(t, err)
	require.Equal(t, history.StatusDeadLettered, st.Status)
	return info
}

func testDeadLetterListAndRequeue(t *testing.T, s store.Store) {
	ctx := testContext(t)
	dead := start(t, s, spec{MaxAttempts: 1})
	info := deadLetter(t, s, dead)
	start(t, s, spec{Type: "other", RunAt: time.Now().Add(time.Hour)}) // pending: no dead letter

	task := getTask(t, s, dead)
	require.Equal(t, history.StatusDeadLettered, task.Status)
	require.Equal(t, &info, task.LastError)
	require.NotNil(t, task.FinishedAt)
	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)), "a dead letter is not claimed")

	list, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, dead, list[0].ID)
	require.Equal(t, history.StatusDeadLettered, list[0].Status)
	none, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Empty(t, none, "dead letters are per namespace")
	typed, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: store.DefaultNamespace, Type: "other"})
	require.NoError(t, err)
	require.Empty(t, typed, "filtered by type")

	res, err := requests.Requeue(ctx, s, &requests.RequeueParams{
		Namespace: store.DefaultNamespace, IDs: []uuid.UUID{dead}, By: "ops@example.com", Reason: "fixed",
	})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, dead, res[0].ID)
	require.NoError(t, res[0].Err)

	task = getTask(t, s, dead)
	require.Equal(t, history.StatusPending, task.Status, "back in its queue")
	require.Nil(t, task.FinishedAt)
	require.NotNil(t, task.LastError, "the evidence stays")
	evs := events(t, s, dead)
	require.NotEmpty(t, evs)
	require.Equal(t, history.TaskRequeuedData{By: "ops@example.com", Reason: "fixed"}, evs[len(evs)-1].Data)
	list, err = s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Empty(t, list, "no longer a dead letter")

	again := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, dead, again.Task.ID)
	require.Equal(t, 2, again.Task.Attempt, "the attempt count goes on")
	require.Equal(t, 1, again.State.Budget.Attempts, "the retry budget starts afresh")
	complete(t, s, again)
}

func testRequeueRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	dead := start(t, s, spec{MaxAttempts: 1})
	deadLetter(t, s, dead)
	pending := start(t, s, spec{RunAt: time.Now().Add(time.Hour)})
	other := start(t, s, spec{Namespace: "tenant-b", RunAt: time.Now().Add(time.Hour)})
	missing := uuid.New()

	_, err := requests.Requeue(ctx, s, &requests.RequeueParams{Namespace: store.DefaultNamespace, IDs: []uuid.UUID{dead}})
	require.Error(t, err, "By is required")
	res, err := requests.Requeue(ctx, s, &requests.RequeueParams{
		Namespace: store.DefaultNamespace, IDs: []uuid.UUID{pending, other, missing}, By: "ops",
	})
	require.NoError(t, err, "each task succeeds or fails on its own")
	require.Len(t, res, 3)
	requireIs(t, res[0].Err, store.ErrTaskState, "only a dead-lettered task is requeued")
	requireIs(t, res[1].Err, store.ErrNotFound, "another namespace's task")
	requireIs(t, res[2].Err, store.ErrNotFound)
	require.Equal(t, history.StatusDeadLettered, getTask(t, s, dead).Status, "untouched by the refusals")
	require.Equal(t, history.StatusPending, getTask(t, s, pending).Status)
}

func testStartDeadlineExpires(t *testing.T, s store.Store) {
	ctx := testContext(t)
	past := time.Now().Add(-time.Second)
	late := start(t, s, spec{StartDeadline: &past})
	future := time.Now().Add(time.Hour)
	inTime := start(t, s, spec{StartDeadline: &future, RunAt: time.Now().Add(time.Hour)})

	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)), "never a first start past the start deadline")
	n, err := maintenance.ExpireStartDeadlines(ctx, s, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	task := getTask(t, s, late)
	require.Equal(t, history.StatusExpired, task.Status)
	require.NotNil(t, task.FinishedAt)
	require.Zero(t, task.Attempt, "it never ran")
	require.Equal(t, []history.Type{history.TaskScheduled, history.TaskExpired}, eventTypes(t, s, late))
	require.Equal(t, history.StatusPending, getTask(t, s, inTime).Status, "a task within its start deadline is left alone")

	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)))
	n, err = maintenance.ExpireStartDeadlines(ctx, s, 100)
	require.NoError(t, err)
	require.Zero(t, n, "expired once")
}
