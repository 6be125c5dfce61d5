package sdk_test

import (
	"context"
	"fmt"
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

// TestCrashingChildDeadLettersAtItsTypesBudget: a child whose step kills
// its worker, every attempt, is dead-lettered by the rescuer at its type's
// retry budget (2), as a task of that type started on its own would be,
// not retried without end; its parent sees it end (child_finished,
// dead_lettered) and completes as its workflow decides. A child records
// its budget: its type's (the default policy's 10 for a type without
// one), or ChildOpts.MaxAttempts. On both stores.
func TestCrashingChildDeadLettersAtItsTypesBudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		// This worker runs the parents and rescues; the crashing child
		// runs on workers of its own, abandoned as a crash would leave them.
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, RescueInterval: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		crashed := make(chan struct{}, 1)
		crashing := sdk.NewWorkflow("budget.crash", 1, func(ctx workflow.Context, _ int) (int, error) {
			return workflow.Step(ctx, "crash", func(ctx context.Context) (int, error) {
				crashed <- struct{}{}
				<-ctx.Done() // the worker dies here
				return 0, ctx.Err()
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(2)})
		plain := sdk.NewWorkflow("budget.plain", 1, func(ctx workflow.Context, n int) (int, error) { return n, nil }, nil)
		parent := sdk.NewWorkflow("budget.parent", 1, func(ctx workflow.Context, _ int) (string, error) {
			byDefault := workflow.StartChild(ctx, plain, 1, nil)
			overridden := workflow.StartChild(ctx, plain, 2, &workflow.ChildOpts{MaxAttempts: 5})
			for _, c := range []*workflow.Child[int]{byDefault, overridden} {
				if _, err := c.Result(ctx); err != nil {
					return "", err
				}
			}
			_, err := workflow.StartChild(ctx, crashing, 3, nil).Result(ctx)
			var ce *workflow.ChildError
			if !errors.As(err, &ce) {
				return "", fmt.Errorf("want a ChildError, got %v", err)
			}
			return "child " + string(ce.Status), nil
		}, nil)
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, plain)
		startWorker(t, b.worker)
		run, err := sdk.Start(ctx, b.client, parent, 0, nil)
		require.NoError(t, err)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			_, _ = b.client.Wait(ctx, run.ID)
		}()

		for attempts := 0; ; {
			crasher := b.newWorker(t, sdk.WorkerConfig{Concurrency: 1, LeaseTTL: time.Second,
				HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1})
			sdk.Register(crasher, crashing)
			startWorker(t, crasher)
			done := false
			select {
			case <-crashed:
				attempts++
			case <-finished:
				done = true
			}
			sdk.AbandonWorker(crasher)
			stopWorker(t, crasher)
			require.NoError(t, ctx.Err(), "the parent did not finish in time")
			require.LessOrEqual(t, attempts, 2, "the child ran past its type's budget of 2")
			if done {
				break
			}
		}

		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "child dead_lettered", out)
		st := taskState(t, b.client, run.ID)
		require.Len(t, st.Children, 3)
		budgets := make([]int, 3)
		for i, c := range st.Children {
			info := mustInfo(t, b.client, c.ID)
			budgets[i] = info.MaxAttempts
			sched := taskHistory(t, b.client, info.ID)[0].Data.(history.TaskScheduledData)
			require.Equal(t, info.MaxAttempts, sched.MaxAttempts, "child %d: the budget is recorded in task_scheduled", i)
		}
		require.Equal(t, []int{history.DefaultMaxAttempts, 5, 2}, budgets, "the type's budget, or ChildOpts'")
		crash := mustInfo(t, b.client, st.Children[2].ID)
		require.Equal(t, history.StatusDeadLettered, crash.Status)
		require.Equal(t, 2, crash.Attempt)
		require.Equal(t, "lease_expired", crash.LastError.Kind)
		fin := eventsOf[history.ChildFinishedData](taskHistory(t, b.client, run.ID))
		require.Len(t, fin, 3)
		require.Equal(t, history.StatusDeadLettered, fin[2].Status, "the parent's child_finished says how the child ended")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func mustInfo(t *testing.T, c *sdk.Client, id string) *sdk.TaskInfo {
	t.Helper()
	info, err := c.Get(context.Background(), uuid.MustParse(id))
	require.NoError(t, err)
	return info
}
