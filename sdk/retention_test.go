package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A namespace's retention, set through the client, is applied by the
// worker's rescuer: its finished tasks go, whole; a late start with a
// removed task's key names the removed task; settings are validated at
// the SDK's edge on both stores alike.
func TestNamespaceRetentionRemovesFinishedTasks(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, RescueInterval: 20 * time.Millisecond})
		wf := sdk.NewWorkflow("report.build", 1, func(ctx workflow.Context, n int) (int, error) { return n, nil })
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.Error(t, b.client.SetNamespace(ctx, "bad name", sdk.NamespaceSettings{Retention: time.Hour}))
		require.Error(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: -time.Hour}))
		require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: 100 * time.Millisecond, KeyRetention: time.Hour}))
		got, err := b.client.Namespaces(ctx)
		require.NoError(t, err)
		require.Equal(t, []store.NamespaceConfig{{Name: "default", Retention: 100 * time.Millisecond, KeyRetention: time.Hour}}, got)

		res, err := sdk.Start(ctx, b.client, wf, 7, sdk.StartOpts{IdempotencyKey: "report-7"})
		require.NoError(t, err)
		startWorker(t, b.worker)
		out, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, out)
		require.Eventually(t, func() bool {
			_, err := b.client.Get(ctx, res.ID)
			return err != nil
		}, 10*time.Second, 20*time.Millisecond, "the finished task is removed after its retention")
		_, err = b.client.Get(ctx, res.ID)
		require.ErrorIs(t, err, sdk.ErrNotFound)
		again, err := sdk.Start(ctx, b.client, wf, 7, sdk.StartOpts{IdempotencyKey: "report-7"})
		require.NoError(t, err)
		require.Equal(t, res.ID, again.ID, "the key stays taken: the late duplicate names the removed task")
		require.True(t, again.Existing)
		stopWorker(t, b.worker)
	})
}
