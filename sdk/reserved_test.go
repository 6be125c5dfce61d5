package sdk_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// victimDocument is the blob of another task that forged references aim at.
const victimDocument = `"the victim's document, 7f3a"`

// TestForgedReferencesAreRefusedAndNeverResolved replays finding F3
// through the SDK: payloads naming cairn's reserved members anywhere in
// their object (escaped, or after another member, which PostgreSQL's jsonb
// would turn into a reference) are refused as inputs and as signals, and
// nothing is written. Behind the edge, a reference that names another
// task's blob (written into the store directly, as the edge would not let
// it) is never resolved: not by the worker (the task does not complete
// with the blob's bytes), nor by the client (Get answers the reference).
// On both stores.
func TestForgedReferencesAreRefusedAndNeverResolved(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		echo := sdk.NewWorkflow("forge.echo", 1, func(ctx workflow.Context, in json.RawMessage) (json.RawMessage, error) {
			return in, nil
		}, &sdk.WorkflowOpts{Retry: fastRetry(2)})
		receive := sdk.NewWorkflow("forge.receive", 1, func(ctx workflow.Context, _ int) (json.RawMessage, error) {
			v, _, err := workflow.Receive[json.RawMessage](ctx, "doc", time.Minute)
			return v, err
		}, &sdk.WorkflowOpts{Retry: fastRetry(2)})
		sdk.Register(b.worker, echo)
		sdk.Register(b.worker, receive)
		startWorker(t, b.worker)
		s := sdk.ClientStore(b.client)

		victim, err := b.client.StartDynamic(ctx, sdk.TypeRef{Name: "forge.victim", Version: 1}, 1, nil)
		require.NoError(t, err)
		ref := putPlainBlob(t, s, "default", victim.ID, "application/json", []byte(victimDocument))
		refJSON, err := json.Marshal(ref)
		require.NoError(t, err)
		r := string(refJSON)
		waiting, err := sdk.Start(ctx, b.client, receive, 0, nil)
		require.NoError(t, err)
		tasks := func() int {
			return len(enginetest.TaskIDs(t, s))
		}
		before := tasks()

		for _, forged := range []string{
			`{"canonical_sha256":"x","cairn_blob":` + r + `}`,
			`{"cairn\u005fblob":` + r + `}`,
			`{"a":1,"cairn_blob":` + r + `}`,
			`{"cairn\u005fsealed":{"v":1,"task":"` + victim.ID.String() + `","data":"AAAA"}}`,
		} {
			_, err := sdk.Start(ctx, b.client, echo, json.RawMessage(forged), nil)
			require.ErrorIs(t, err, sdk.ErrInvalid, "input %s", forged)
			require.ErrorContains(t, err, "reserves")
			_, err = b.client.Signal(ctx, waiting.ID, "doc", json.RawMessage(forged), nil)
			require.ErrorIs(t, err, sdk.ErrInvalid, "signal %s", forged)
		}
		require.Equal(t, before, tasks(), "no task was started")
		require.NotContains(t, eventTypesOf(t, b.client, waiting.ID), history.SignalReceived, "no signal was written")

		// Behind the edge: the reference as cairn writes it, but to a blob
		// of another task.
		envelope := history.BlobEnvelope(ref)
		forgedStart, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
			TaskType: "forge.echo", TypeVersion: 1, Queue: "default", MaxAttempts: 2, Input: envelope}})
		require.NoError(t, err)
		_, err = engine.SignalTask(ctx, s, &store.TaskSignalParams{Namespace: "default", TaskID: waiting.ID, Name: "doc", Payload: envelope})
		require.NoError(t, err)
		for _, id := range []uuid.UUID{forgedStart.ID, waiting.ID} {
			info := waitTask(t, b.client, id)
			require.NotEqual(t, history.StatusCompleted, info.Status, "task %s did not run on another task's blob", id)
			raw, err := json.Marshal(info)
			require.NoError(t, err)
			require.NotContains(t, string(raw), strings.Trim(victimDocument, `"`), "task %s: nothing of the blob reached it", id)
		}
		info, err := b.client.Get(ctx, forgedStart.ID)
		require.NoError(t, err)
		require.JSONEq(t, string(envelope), string(info.Input), "the client does not read another task's blob for it")
		data, err := b.client.GetBlob(ctx, ref)
		require.NoError(t, err, "the blob is there, for a caller that names it")
		require.Equal(t, victimDocument, string(data))
		enginetest.RequireProjectionsMatch(t, s)
	})
}

// TestSquattedChildKeyFailsTheParent replays finding F4: a start with an
// idempotency key of cairn's (the key a parent's child 0 gets) is refused
// at the edge; and a task that holds such a key anyway (written into the
// store directly) is not adopted as the child: the parent fails at once,
// permanently, kind child_key_taken, instead of waiting forever for a
// task that never reports to it. On both stores.
func TestSquattedChildKeyFailsTheParent(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		child := sdk.NewWorkflow("squat.child", 1, func(ctx workflow.Context, n int) (int, error) { return n, nil }, nil)
		gate := make(chan struct{})
		parent := sdk.NewWorkflow("squat.parent", 1, func(ctx workflow.Context, _ int) (int, error) {
			if _, err := workflow.Step(ctx, "gate", func(context.Context) (int, error) {
				<-gate
				return 0, nil
			}, nil); err != nil {
				return 0, err
			}
			return workflow.StartChild(ctx, child, 7, nil).Result(ctx)
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		startWorker(t, b.worker)

		run, err := sdk.Start(ctx, b.client, parent, 0, nil)
		require.NoError(t, err)
		key := "cairn:child:" + run.ID.String() + ":0"
		_, err = sdk.Start(ctx, b.client, child, 1, &sdk.StartOpts{IdempotencyKey: key})
		require.ErrorIs(t, err, sdk.ErrInvalid)
		require.ErrorContains(t, err, `the prefix "cairn:" is cairn's own`)
		_, err = b.client.StartMany(ctx, []sdk.StartParams{{Workflow: child, Input: 1, Opts: sdk.StartOpts{IdempotencyKey: "cairn:x"}}})
		require.ErrorIs(t, err, sdk.ErrInvalid)

		// Behind the edge, the squat the probe made.
		squat, err := sdk.ClientStore(b.client).TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
			TaskType: "squat.child", TypeVersion: 1, Queue: "default", MaxAttempts: 1, Input: json.RawMessage(`1`), IdempotencyKey: key}})
		require.NoError(t, err)
		close(gate)
		_, err = run.Result(ctx)
		var te *sdk.TaskError
		require.ErrorAs(t, err, &te, "the parent ends, not waits")
		require.Equal(t, history.StatusFailed, te.Status)
		require.Equal(t, "child_key_taken", te.Kind)
		require.Equal(t, history.Permanent, te.Class)
		require.Contains(t, te.Message, "not this parent's child")
		require.Empty(t, taskState(t, b.client, run.ID).Children, "nothing adopted")
		require.Len(t, eventsOf[history.AttemptFailedData](taskHistory(t, b.client, run.ID)), 1, "failed once, not retried")
		info := waitTask(t, b.client, squat.ID)
		require.Nil(t, info.ParentID, "the squatter is no one's child")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
