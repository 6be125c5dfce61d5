package requests_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// deadLetter claims a task and dead-letters its attempt.
func deadLetter(t *testing.T, s *pgstore.Store, id uuid.UUID) {
	t.Helper()
	ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
	require.Equal(t, id, ct.Task.ID)
	info := history.ErrorInfo{Class: history.Permanent, Message: "bad document", Status: 422}
	_, err := enginetest.AppendFenced(context.Background(), s, ct, history.AttemptFailedData{Error: info},
		history.TaskDeadLetteredData{Reason: "permanent error", Error: info})
	require.NoError(t, err)
}

func TestTaskRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	dead := enginetest.StartTask(t, s, nil)
	deadLetter(t, s, dead)
	pending := enginetest.StartTask(t, s, &enginetest.TaskOpts{RunAt: time.Now().Add(time.Hour)})
	other := enginetest.StartTask(t, s, &enginetest.TaskOpts{Namespace: "tenant-b", RunAt: time.Now().Add(time.Hour)})
	missing := uuid.Must(uuid.NewV7())

	_, err := requests.Requeue(ctx, s, &requests.RequeueParams{Namespace: "default", IDs: []uuid.UUID{dead}})
	require.ErrorContains(t, err, "By (who asks) is empty")
	_, err = requests.Requeue(ctx, s, &requests.RequeueParams{Namespace: "default", IDs: []uuid.UUID{dead, dead}, By: "ops"})
	require.ErrorContains(t, err, "named twice")

	before := time.Now()
	res, err := requests.Requeue(ctx, s, &requests.RequeueParams{
		Namespace: "default", IDs: []uuid.UUID{dead, pending, other, missing}, By: "ops@example.com", Reason: "fixed",
	})
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.NoError(t, res[0].Err)
	require.True(t, errors.Is(res[1].Err, store.ErrTaskState), "%v", res[1].Err)
	require.ErrorContains(t, res[1].Err, "it is pending")
	require.True(t, errors.Is(res[2].Err, store.ErrNotFound), "another namespace's task is not found: %v", res[2].Err)
	require.True(t, errors.Is(res[3].Err, store.ErrNotFound), "%v", res[3].Err)

	task := enginetest.GetTask(t, s, dead)
	require.Equal(t, history.StatusPending, task.Status)
	require.Nil(t, task.FinishedAt)
	require.WithinDuration(t, before, task.RunAt, 5*time.Second, "due at once")
	require.NotNil(t, task.LastError, "the evidence stays")
	evs := enginetest.Events(t, s, dead)
	require.Equal(t, history.TaskRequeuedData{By: "ops@example.com", Reason: "fixed"}, evs[len(evs)-1].Data)

	again := enginetest.ClaimOne(t, s, "w2", time.Minute)
	require.Equal(t, dead, again.Task.ID)
	require.Equal(t, 2, again.Task.Attempt, "the attempt count goes on")
	require.Equal(t, 1, again.State.Budget.Attempts, "the budget starts afresh")
	enginetest.Complete(t, s, again)
	require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, s))
}

func TestDeadLetterList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	var ids []uuid.UUID
	for range 5 {
		id := enginetest.StartTask(t, s, nil)
		deadLetter(t, s, id)
		ids = append(ids, id)
	}
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "other", RunAt: time.Now().Add(time.Hour)})

	// Pages of two, newest first, cover all five once.
	var seen []uuid.UUID
	params := &store.DeadLetterListParams{Namespace: "default", Limit: 2}
	for {
		page, err := s.DeadLetterList(ctx, params)
		require.NoError(t, err)
		for _, task := range page {
			require.Equal(t, history.StatusDeadLettered, task.Status)
			seen = append(seen, task.ID)
		}
		if len(page) < 2 {
			break
		}
		last := page[len(page)-1]
		params.Before = &store.DeadLetterCursor{FinishedAt: *last.FinishedAt, ID: last.ID}
	}
	require.Len(t, seen, 5)
	for i := range ids {
		require.Equal(t, ids[len(ids)-1-i], seen[i], "newest first")
	}

	none, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Empty(t, none)
	typed, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: "default", Type: "other"})
	require.NoError(t, err)
	require.Empty(t, typed)
}

// A dead-lettered child whose parent retention removed (the parent ended
// first, without awaiting it) is not requeued: its end would report to
// nobody. It says so, and the child stays as it was.
func TestRequeueRefusesAChildWhoseParentWasRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	parentID := enginetest.StartTask(t, s, nil)
	parent := enginetest.ClaimOne(t, s, "w1", time.Minute)
	require.Equal(t, parentID, parent.Task.ID)
	res, err := requests.StartChildren(ctx, s, &store.ChildStartParams{
		Parent:   store.EventAppendParams{TaskID: parentID, State: parent.State, Epoch: parent.State.Lease.Epoch, Attempt: parent.State.Attempt},
		Children: []store.ChildStart{{Task: *(*enginetest.TaskOpts)(nil).Params()}},
	})
	require.NoError(t, err)
	parent.State = res.State
	enginetest.Complete(t, s, parent) // the parent ends without awaiting its child
	child := res.IDs[0]
	deadLetter(t, s, child)

	// The parent finished first, so a removal of one task takes it.
	removed, err := enginetest.RemoveFinished(ctx, s, &store.RemoveFinishedParams{
		Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Hour), Max: 1,
	})
	require.NoError(t, err)
	require.Equal(t, 1, removed.Tasks)
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: parentID})
	require.ErrorIs(t, err, store.ErrNotFound)

	out, err := requests.Requeue(ctx, s, &requests.RequeueParams{Namespace: "default", IDs: []uuid.UUID{child}, By: "ops"})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, store.ErrTaskState)
	require.ErrorContains(t, out[0].Err, "its parent task "+parentID.String()+" was removed by retention")
	require.Equal(t, history.StatusDeadLettered, enginetest.GetTask(t, s, child).Status)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}
