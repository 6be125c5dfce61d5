package storetest

import (
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

// forkTests: a fork (requests.Fork, over a Tx of the store): the fork's
// start, its copies and the original's task_forked in one transaction;
// what the fold refuses writes nothing. Bare only: the payload codecs
// are the SDK edge's, tested there.
var forkTests = []conformanceTest{
	{"ForkOfAFinishedTask", testForkFinished},
	{"ForkRefusals", testForkRefusals},
	{"ForkRefusesAStepCompensatedSinceTheRead", testForkCompensatedMeanwhile},
	{"ResetEndsTheOriginalInTheForksAppend", testForkReset},
	{"QueueSeriesCountsAPendingForkAsWaiting", testQueueSeriesFork},
}

// finishedWithSteps starts a task and completes it with steps named
// names, their outputs the positions.
func finishedWithSteps(t *testing.T, s store.Store, names ...string) uuid.UUID {
	t.Helper()
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	payloads := make([]history.Payload, 0, len(names)+1)
	for i, n := range names {
		payloads = append(payloads, history.StepCompletedData{Position: i, Name: n, Output: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Compensable: i == 0})
	}
	_, err := appendFenced(t, s, ct, append(payloads, history.TaskCompletedData{Output: json.RawMessage(`"done"`)})...)
	require.NoError(t, err)
	return id
}

// forkParams are the params of a fork of task id at position at, its
// copies as ForkCopies finds them.
func forkParams(t *testing.T, s store.Store, id uuid.UUID, at int) *requests.ForkParams {
	t.Helper()
	evs := events(t, s, id)
	state, err := history.Replay(evs)
	require.NoError(t, err)
	copies, patches, err := requests.ForkCopies(id, evs, state, at)
	require.NoError(t, err)
	steps := make([]history.StepCompletedData, len(copies))
	for i, c := range copies {
		steps[i] = c.Step
	}
	sc := state.Scheduled
	sc.RunAt, sc.IdempotencyKey = time.Now(), ""
	sc.ForkedFrom = &history.ForkOrigin{TaskID: id.String(), Position: at}
	return &requests.ForkParams{
		Namespace: store.DefaultNamespace, Original: id, OriginalSeq: state.LastSeq, Position: at, By: "ops",
		Start:  &store.TaskStartParams{Namespace: store.DefaultNamespace, ID: uuid.Must(uuid.NewV7()), Scheduled: sc},
		Copies: steps, Patches: patches,
	}
}

func testForkFinished(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := finishedWithSteps(t, s, "a", "b", "c")
	p := forkParams(t, s, id, 1)
	p.Copies[1].Output = json.RawMessage(`{"n":9}`)
	res, err := requests.Fork(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, p.Start.ID, res.ID)
	require.False(t, res.Existing)
	require.Len(t, res.State.Steps, 2)

	orig := events(t, s, id)
	require.Equal(t, history.TaskForkedData{ForkTaskID: res.ID.String(), Position: 1, By: "ops"}, orig[len(orig)-1].Data)
	require.Equal(t, history.StatusCompleted, getTask(t, s, id).Status, "the original keeps its status")

	fork := events(t, s, res.ID)
	require.Equal(t, []history.Type{history.TaskScheduled, history.StepCompleted, history.StepCompleted}, eventTypes(t, s, res.ID))
	require.Equal(t, &history.ForkOrigin{TaskID: id.String(), Position: 1}, fork[0].Data.(history.TaskScheduledData).ForkedFrom)
	require.Equal(t, orig[2].Seq, fork[1].Data.(history.StepCompletedData).CopiedFromSeq)
	require.JSONEq(t, `{"n":9}`, string(fork[2].Data.(history.StepCompletedData).Output))
	require.True(t, orig[2].Data.(history.StepCompletedData).Compensable)
	require.False(t, fork[1].Data.(history.StepCompletedData).Compensable, "a fork never undoes what it did not do")
	require.Equal(t, history.StatusPending, getTask(t, s, res.ID).Status)

	// The fork runs on from its copies.
	ct := claimOne(t, s, "w2", time.Minute)
	require.Equal(t, res.ID, ct.Task.ID)
	require.Len(t, ct.State.Steps, 2)
	_, err = appendFenced(t, s, ct, history.StepCompletedData{Position: 2, Name: "c"}, history.TaskCompletedData{})
	require.NoError(t, err)

	// A fork of the fork, with a key; again with the key is the same fork.
	p2 := forkParams(t, s, res.ID, 0)
	p2.Start.Scheduled.IdempotencyKey = "fix-1"
	first, err := requests.Fork(ctx, s, p2)
	require.NoError(t, err)
	p3 := forkParams(t, s, res.ID, 0)
	p3.Start.Scheduled.IdempotencyKey = "fix-1"
	again, err := requests.Fork(ctx, s, p3)
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, first.ID, again.ID)
	forked := 0
	for _, e := range events(t, s, res.ID) {
		if e.Type() == history.TaskForked {
			forked++
		}
	}
	require.Equal(t, 1, forked, "the second fork wrote nothing")
}

func testForkRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := finishedWithSteps(t, s, "a", "b")
	evs := events(t, s, id)
	state, err := history.Replay(evs)
	require.NoError(t, err)
	_, _, err = requests.ForkCopies(id, evs, state, 2)
	requireIs(t, err, store.ErrTaskState)
	require.ErrorContains(t, err, "it has 2 steps on record (positions 0 to 1)")
	_, _, err = requests.ForkCopies(id, evs, state, -1)
	require.ErrorContains(t, err, "position -1 is negative")

	// Copies the fold refuses (a position skipped): nothing is written,
	// neither the fork nor task_forked.
	p := forkParams(t, s, id, 1)
	p.Copies[1].Position = 3
	_, err = requests.Fork(ctx, s, p)
	requireIs(t, err, history.ErrInvalidHistory)
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: p.Start.ID})
	requireIs(t, err, store.ErrNotFound)
	require.Equal(t, state.LastSeq, getTask(t, s, id).LastSeq)

	// A fork at a position the original does not have.
	p = forkParams(t, s, id, 1)
	p.Position = 0
	_, err = requests.Fork(ctx, s, p)
	require.ErrorContains(t, err, "copies")
	p = forkParams(t, s, id, 1)
	p.By = ""
	_, err = requests.Fork(ctx, s, p)
	require.ErrorContains(t, err, "By (who asks) is empty")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: p.Start.ID})
	requireIs(t, err, store.ErrNotFound)
}

// A step at or before the position compensated between the read that
// planned the fork and its transaction: the fork is refused, nothing
// written, not a fork holding a copy of an undone step. So is a plan
// whose copies name other records than the history's.
func testForkCompensatedMeanwhile(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := finishedWithSteps(t, s, "a", "b")
	p := forkParams(t, s, id, 1)

	p2 := forkParams(t, s, id, 1)
	p2.Copies[0].CopiedFromSeq++
	_, err := requests.Fork(ctx, s, p2)
	requireIs(t, err, store.ErrTaskState)
	require.ErrorContains(t, err, "no longer those read")

	_, err = requests.Compensate(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: id, By: "ops"})
	require.NoError(t, err)
	ct := claimOne(t, s, "w", time.Minute)
	require.Equal(t, id, ct.Task.ID)
	_, err = appendFenced(t, s, ct,
		history.CompensationStartedData{Reason: history.CompensateRequested, Steps: []int{0}},
		history.StepCompensatedData{Position: 0, Name: "a"})
	require.NoError(t, err)
	before := getTask(t, s, id).LastSeq

	_, err = requests.Fork(ctx, s, p)
	requireIs(t, err, store.ErrTaskState)
	require.ErrorContains(t, err, "step 0 was compensated")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: p.Start.ID})
	requireIs(t, err, store.ErrNotFound)
	require.Equal(t, before, getTask(t, s, id).LastSeq)
}

// A reset's request on the original (ForkParams.Reset) is decided in the
// fork's transaction and appended with task_forked: a running original
// gets cancel_requested, a completed one compensation_requested when
// asked (else nothing more); compensation asked of a completed task with
// no compensable step refuses the fork, nothing written.
func testForkReset(t *testing.T, s store.Store) {
	ctx := testContext(t)
	running := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	require.Equal(t, running, ct.Task.ID)
	_, err := appendFenced(t, s, ct, history.StepCompletedData{Position: 0, Name: "a", Output: json.RawMessage(`1`)},
		history.StepCompletedData{Position: 1, Name: "b", Output: json.RawMessage(`2`)})
	require.NoError(t, err)
	// The originals first: a fork is due, and would be claimed.
	done := finishedWithSteps(t, s, "a", "b")
	left := finishedWithSteps(t, s, "a")
	plain := start(t, s, spec{})
	ct = claimOne(t, s, "w", time.Minute)
	require.Equal(t, plain, ct.Task.ID)
	_, err = appendFenced(t, s, ct, history.StepCompletedData{Position: 0, Name: "a", Output: json.RawMessage(`1`)}, history.TaskCompletedData{})
	require.NoError(t, err)
	p := forkParams(t, s, running, 0)
	p.Reset = &requests.ForkReset{Reason: "bad price"}
	res, err := requests.Fork(ctx, s, p)
	require.NoError(t, err)
	orig := events(t, s, running)
	n := len(orig)
	require.Equal(t, history.TaskForkedData{ForkTaskID: res.ID.String(), Position: 0, By: "ops"}, orig[n-2].Data)
	require.Equal(t, history.CancelRequestedData{By: "ops", Reason: "bad price"}, orig[n-1].Data)
	require.Equal(t, orig[n-2].At, orig[n-1].At, "one append")

	p = forkParams(t, s, done, 1)
	p.Reset = &requests.ForkReset{Compensate: true}
	res, err = requests.Fork(ctx, s, p)
	require.NoError(t, err)
	orig = events(t, s, done)
	n = len(orig)
	require.Equal(t, history.TaskForkedData{ForkTaskID: res.ID.String(), Position: 1, By: "ops"}, orig[n-2].Data)
	require.Equal(t, history.CompensationRequestedData{By: "ops", Reason: "reset: forked as " + res.ID.String()}, orig[n-1].Data)

	p = forkParams(t, s, left, 0)
	p.Reset = &requests.ForkReset{}
	_, err = requests.Fork(ctx, s, p)
	require.NoError(t, err)
	orig = events(t, s, left)
	require.Equal(t, history.TaskForked, orig[len(orig)-1].Type(), "a completed original left as it is")

	// Compensation asked of a completed task with no compensable step:
	// the fork is refused with it.
	p = forkParams(t, s, plain, 0)
	p.Reset = &requests.ForkReset{Compensate: true}
	before := getTask(t, s, plain).LastSeq
	_, err = requests.Fork(ctx, s, p)
	requireIs(t, err, store.ErrTaskState)
	require.ErrorContains(t, err, "none of its steps has a compensator")
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: p.Start.ID})
	requireIs(t, err, store.ErrNotFound)
	require.Equal(t, before, getTask(t, s, plain).LastSeq)
}

// A fork's copied steps (step_completed of attempt 0) ran in the
// original: the pending fork holding them is waiting and due, not
// running; the original's task_forked keeps it completed.
func testQueueSeriesFork(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := finishedWithSteps(t, s, "a", "b")
	_, err := requests.Fork(ctx, s, forkParams(t, s, id, 1))
	require.NoError(t, err)
	all, err := s.QueueSeries(ctx, &store.QueueSeriesParams{Namespace: store.DefaultNamespace, Window: time.Hour})
	require.NoError(t, err)
	last := seriesOf(t, all, defaultQueue).Points[store.DefaultSeriesBuckets-1]
	require.Equal(t, []int{1, 1, 0}, []int{last.Waiting, last.Due, last.Running}, "waiting, due, running")
	require.Equal(t, []int{1, 1}, []int{last.Completed, last.Started}, "the original's run")
}
