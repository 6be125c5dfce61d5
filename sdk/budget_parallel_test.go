package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Parallel budgeted steps while the body starts children: the steps'
// ledger appends and the child starts write the attempt's state from
// different goroutines, and must not trip over each other (run with
// -race).
func TestBudgetParallelStepsBesideChildStarts(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 8})
		child := sdk.NewWorkflow("budget.par.child", 1, func(ctx workflow.Context, n int) (int, error) { return n, nil }, nil)
		parent := sdk.NewWorkflow("budget.par.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			var futures []*workflow.Future[int]
			var children []*workflow.Child[int]
			for i := range 20 {
				futures = append(futures, workflow.Go(ctx, "llm", func(ctx context.Context) (int, error) {
					activities.RecordUsage(ctx, llmUsage)
					return i, nil
				}, &workflow.StepOpts{Spend: llmSpend}))
				children = append(children, workflow.StartChild(ctx, child, i, nil))
			}
			sum := 0
			for i := range 20 {
				n, err := futures[i].Get(ctx)
				if err != nil {
					return 0, err
				}
				m, err := children[i].Result(ctx)
				if err != nil {
					return 0, err
				}
				sum += n + m
			}
			return sum, nil
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, child)
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, &sdk.StartOpts{Budget: &sdk.Budget{USD: 100}})
		require.NoError(t, err)
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 2*190, got)
		require.Len(t, ledger[history.BudgetSettledData](t, b.client, run.ID), 20)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A Map whose items a budget that waits refuses partway: the refused
// items wait for their siblings to settle, then the task waits for a
// raise (no retry spent, not dead-lettered), and a raise lets it finish.
func TestBudgetWaitUnderMap(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		wf := sdk.NewWorkflow("budget.map", 1, func(ctx workflow.Context, n int) (int, error) {
			items := make([]int, n)
			out, err := workflow.Map(ctx, "llm", items, func(ctx context.Context, _ int) (int, error) {
				activities.RecordUsage(ctx, llmUsage)
				return 1, nil
			}, &workflow.MapOpts{Step: workflow.StepOpts{Spend: llmSpend}})
			return len(out), err
		}, &sdk.WorkflowOpts{Retry: fastRetry(2)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, 8, &sdk.StartOpts{
			Budget: &sdk.Budget{USD: 0.10, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}})
		require.NoError(t, err)
		enginetest.WaitFor(t, "the task to wait over its budget", func() bool {
			refused := ledger[history.BudgetRefusedData](t, b.client, run.ID)
			return len(refused) > 0 && refused[len(refused)-1].Action == history.BudgetWait && refused[len(refused)-1].Deadline != nil
		})
		info, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status, "waiting, not dead-lettered")

		woken, err := b.client.RaiseBudget(ctx, "task:"+run.ID.String(), sdk.BudgetRaise{USD: 1, By: "alice"})
		require.NoError(t, err)
		require.Len(t, woken, 1)
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, got)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A future the body leaves running when it returns is cancelled: it
// neither reserves nor, refused by a budget that waits, ends the
// completed run waiting.
func TestBudgetFutureLeftRunningDoesNotReserve(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("budget.hedge", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			n, err := workflow.Step(ctx, "first", func(ctx context.Context) (int, error) {
				activities.RecordUsage(ctx, llmUsage)
				return 1, nil
			}, &workflow.StepOpts{Spend: llmSpend})
			if err != nil {
				return 0, err
			}
			workflow.Go(ctx, "hedge", func(ctx context.Context) (int, error) {
				activities.RecordUsage(ctx, llmUsage)
				return 2, nil
			}, &workflow.StepOpts{Spend: llmSpend})
			return n, nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, &sdk.StartOpts{
			Budget: &sdk.Budget{USD: 0.05, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}})
		require.NoError(t, err)
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, got)
		require.Empty(t, ledger[history.BudgetRefusedData](t, b.client, run.ID))
	})
}
