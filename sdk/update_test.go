package sdk_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// reassignable is a workflow whose approver an update ("reassign")
// changes while it awaits its approval: it then notifies the approver of
// the moment, and returns who it was.
func reassignable(typ string) *sdk.Workflow[struct{}, string] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		approver := "alice"
		if err := workflow.SetUpdate(ctx, "reassign", func(ctx workflow.Context, to string) (string, error) {
			prev := approver
			approver = to
			return prev, nil
		}, &workflow.UpdateOpts[string]{Validator: func(to string) error {
			if to == "" {
				return errors.New("reassign to whom?")
			}
			return nil
		}}); err != nil {
			return "", err
		}
		if _, err := workflow.Step(ctx, "draft", func(context.Context) (string, error) { return "draft", nil }, nil); err != nil {
			return "", err
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return "", err
		}
		return workflow.Step(ctx, "notify", func(context.Context) (string, error) { return approver, nil }, nil)
	}, nil)
}

func TestUpdateWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := reassignable("update.reassign")
		sdk.Register(b.worker, wf)
		replayer := sdk.NewReplayer()
		require.NoError(t, sdk.RegisterReplay(replayer, wf))
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		// b.client validates through an inquiry a worker answers; local
		// in process, on its worker's code.
		local := newClient(t, sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, Worker: b.worker})

		// Rejected by the validator, or no handler of the name: nothing
		// is written.
		before := taskHistory(t, b.client, run.ID)
		_, err = b.client.Update(ctx, run.ID, "reassign", "", nil)
		require.ErrorIs(t, err, sdk.ErrUpdateRejected)
		require.ErrorContains(t, err, "reassign to whom?")
		_, err = local.Update(ctx, run.ID, "reassign", "", nil)
		require.ErrorIs(t, err, sdk.ErrUpdateRejected)
		require.ErrorContains(t, err, "reassign to whom?")
		for _, c := range []*sdk.Client{b.client, local} {
			_, err = c.Update(ctx, run.ID, "escalate", "bob", nil)
			require.ErrorIs(t, err, sdk.ErrUpdateNotFound)
			_, err = c.Update(ctx, run.ID, "reassign", 42, nil)
			require.ErrorIs(t, err, sdk.ErrUpdateRejected, "args that do not decode are rejected")
		}
		require.Equal(t, before, taskHistory(t, b.client, run.ID))

		// Accepted: the waiting task is woken, applies it and waits again;
		// the caller gets the handler's result. Retried with its id, it is
		// applied once and answers the same.
		res, err := b.client.Update(ctx, run.ID, "reassign", "bob", &sdk.UpdateOpts{UpdateID: "u-1"})
		require.NoError(t, err)
		require.JSONEq(t, `"alice"`, string(res.Output))
		require.False(t, res.Duplicate)
		for _, c := range []*sdk.Client{b.client, local} {
			again, err := c.Update(ctx, run.ID, "reassign", "carol", &sdk.UpdateOpts{UpdateID: "u-1"})
			require.NoError(t, err)
			require.True(t, again.Duplicate)
			require.JSONEq(t, `"alice"`, string(again.Output))
		}
		events := taskHistory(t, b.client, run.ID)
		require.Len(t, eventsOf[history.UpdateAcceptedData](events), 1)
		require.Len(t, eventsOf[history.UpdateCompletedData](events), 1)
		waitForLast(t, b.client, run.ID, history.WaitStarted)
		info, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status, "it waits for its approval again")

		// The approval: the run replays, the handler runs again where it
		// ran, and the workflow takes its course from the update.
		_, err = b.client.Signal(ctx, run.ID, "approve", workflow.Decision{Approved: true}, nil)
		require.NoError(t, err)
		info = waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		require.JSONEq(t, `"bob"`, string(info.Output))

		// A replay of the whole history (as after a crash) agrees.
		require.Nil(t, replayer.ReplayHistory(ctx, run.ID.String(), taskHistory(t, b.client, run.ID)))

		// Finished: refused, and nothing written.
		_, err = b.client.Update(ctx, run.ID, "reassign", "dave", nil)
		require.ErrorIs(t, err, sdk.ErrTaskState)
		// The outcome stays readable by id.
		out, err := b.client.UpdateOutcome(ctx, run.ID, "u-1")
		require.NoError(t, err)
		require.JSONEq(t, `"alice"`, string(out.Output))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestUpdateHandlerError: a handler's error fails the update, not the
// task, and the caller gets it.
func TestUpdateHandlerError(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("update.fails", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			n := 0
			if err := workflow.SetUpdate(ctx, "bump", func(ctx workflow.Context, by int) (int, error) {
				if by > 10 {
					return 0, errors.Newf("bump by %d: too much", by)
				}
				n += by
				return n, nil
			}, nil); err != nil {
				return 0, err
			}
			if err := workflow.Sleep(ctx, time.Hour); err != nil {
				return 0, err
			}
			return n, nil
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.TimerStarted)

		_, err = b.client.Update(ctx, run.ID, "bump", 11, nil)
		var ue *sdk.UpdateError
		require.ErrorAs(t, err, &ue)
		require.ErrorIs(t, err, sdk.ErrUpdateFailed)
		require.Contains(t, ue.Info.Message, "too much")
		res, err := b.client.Update(ctx, run.ID, "bump", 2, nil)
		require.NoError(t, err)
		require.JSONEq(t, "2", string(res.Output))
		var out json.RawMessage = res.Output
		require.NotEmpty(t, out)
		// The task sleeps on: a timer re-armed after each update.
		waitForLast(t, b.client, run.ID, history.TimerStarted)
		events := taskHistory(t, b.client, run.ID)
		require.Len(t, eventsOf[history.TimerStartedData](events), 3)
		info, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status)
	})
}

// waitForLast waits until the last event of task id's history is of typ.
func waitForLast(t *testing.T, c *sdk.Client, id uuid.UUID, typ history.Type) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		events := taskHistory(t, c, id)
		if events[len(events)-1].Type() == typ {
			return
		}
		require.True(t, time.Now().Before(deadline), "task %s: no %s last; history %v", id, typ, eventTypes(events))
		time.Sleep(5 * time.Millisecond)
	}
}
