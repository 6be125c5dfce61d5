package pgstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestStartClaimComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "default", Input: json.RawMessage(`{"a": 1}`), MaxAttempts: 3,
	}})
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{
		Namespace: "default", Queues: []string{"default"}, Types: []store.TypeKey{{Type: "doc", Version: 1}},
		Owner: "w1", Max: 10, LeaseTTL: time.Minute,
	})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ct := claimed[0]
	require.Equal(t, res.ID, ct.Task.ID)
	require.Equal(t, history.StatusRunning, ct.State.Status)
	enginetest.RequireProjectionsMatch(t, s)

	st, err := s.EventAppend(ctx, &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch,
		Attempt: 1, Payloads: []history.Payload{history.StepCompletedData{Position: 0, Name: "ocr", Output: json.RawMessage(`"x"`)}}})
	require.NoError(t, err)
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: ct.Task.ID, State: st, Epoch: st.Lease.Epoch + 1,
		Attempt: 1, Payloads: []history.Payload{history.TaskCompletedData{}}})
	require.True(t, errors.Is(err, store.ErrFenced), "got %v", err)
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: ct.Task.ID, State: st, Epoch: st.Lease.Epoch,
		Attempt: 1, Payloads: []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)}}})
	require.NoError(t, err)
	task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "default", ID: ct.Task.ID})
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, task.Status)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

// A fresh task's claim rebuilds task_scheduled from the row instead of
// reading it: the state must be exactly the replay of the stored events.
func TestClaimOfFreshTaskEqualsReplayOfItsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	deadline := time.Now().Add(time.Hour)
	_, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "default", Input: json.RawMessage(`{"b": [1, 2], "a": "x"}`),
		MaxAttempts: 3, Priority: 4, IdempotencyKey: "k-1", TraceID: "trace-9",
		Labels: map[string]string{"tenant": "acme", "tier": "gold"}, Deadline: &deadline,
	}})
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{
		Namespace: "default", Queues: []string{"default"}, Types: []store.TypeKey{{Type: "doc", Version: 1}},
		Owner: "w1", Max: 10, LeaseTTL: time.Minute,
	})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, claimed[0].Err)
	stored, err := store.TaskEvents(ctx, s, "", claimed[0].Task.ID)
	require.NoError(t, err)
	replayed, err := history.Replay(stored)
	require.NoError(t, err)
	require.Equal(t, replayed, claimed[0].State)
	require.Equal(t, stored, claimed[0].Events)
	require.Equal(t, map[string]string{"tenant": "acme", "tier": "gold"}, claimed[0].State.Scheduled.Labels)
	require.NotNil(t, claimed[0].State.Scheduled.Deadline, "the deadline is rebuilt from the row")
	require.WithinDuration(t, deadline, *claimed[0].State.Scheduled.Deadline, time.Millisecond)
	enginetest.RequireProjectionsMatch(t, s)
}
