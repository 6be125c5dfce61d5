package sdk_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// manyReadsWorkflow is a workflow nobody runs here: its tasks stay
// pending unless a test cancels them.
var manyReadsWorkflow = sdk.NewWorkflow("many.reads", 1, func(ctx workflow.Context, in int) (int, error) { return in, nil }, nil)

// manyReadsTasks starts two tasks in the bundle's namespace (the second
// cancelled) and one in namespace "other" of the same store.
func manyReadsTasks(t *testing.T, b *testBundle) (pending, cancelled, elsewhere uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	first, err := sdk.Start(ctx, b.client, manyReadsWorkflow, 1, nil)
	require.NoError(t, err)
	second, err := sdk.Start(ctx, b.client, manyReadsWorkflow, 2, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(ctx, second.ID, "not needed"))
	other, err := sdk.Start(ctx, namespaceClient(t, b, "other"), manyReadsWorkflow, 3, nil)
	require.NoError(t, err)
	return first.ID, second.ID, other.ID
}

// Statuses answers the status of every task of the client's namespace
// among the ids, and leaves out ids of another namespace and of no task.
func TestStatusesOfManyTasks(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		pending, cancelled, elsewhere := manyReadsTasks(t, b)

		got, err := b.client.Statuses(t.Context(), []uuid.UUID{pending, cancelled, elsewhere, uuid.New()})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]history.Status{pending: history.StatusPending, cancelled: history.StatusCancelled}, got)

		got, err = namespaceClient(t, b, "other").Statuses(t.Context(), []uuid.UUID{pending, elsewhere})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]history.Status{elsewhere: history.StatusPending}, got, "each client keeps to its namespace")

		got, err = b.client.Statuses(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

// RawHistories answers, in one call, the history RawHistory answers for
// each task of the client's namespace among the ids, and nothing for ids
// of another namespace or of no task.
func TestRawHistoriesOfManyTasks(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		pending, cancelled, elsewhere := manyReadsTasks(t, b)
		_, err := b.client.Signal(t.Context(), pending, "ping", map[string]int{"n": 1}, nil)
		require.NoError(t, err)

		got, err := b.client.RawHistories(t.Context(), []uuid.UUID{pending, cancelled, elsewhere, uuid.New(), pending})
		require.NoError(t, err)
		require.Len(t, got, 2)
		for _, id := range []uuid.UUID{pending, cancelled} {
			one, err := b.client.RawHistory(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, one, got[id], "task %s", id)
		}
		require.Equal(t, history.SignalReceived, got[pending][len(got[pending])-1].Type())
		require.Equal(t, history.TaskCancelled, got[cancelled][len(got[cancelled])-1].Type())

		got, err = namespaceClient(t, b, "other").RawHistories(t.Context(), []uuid.UUID{pending, elsewhere})
		require.NoError(t, err)
		require.Len(t, got, 1, "each client keeps to its namespace")
		require.Contains(t, got, elsewhere)
	})
}
