package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
)

// BudgetWaits lists exactly the tasks waiting on a budget: by its
// reference or all of them, with the refused step, and none once a
// raise woke them; a task that finished or waits on another budget is
// not listed under this one.
func TestBudgetWaitsListsTheTasksWaitingOnABudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		wf := llmSteps("budget.waits", nil)
		sdk.Register(b.worker, wf)
		for _, key := range []string{"t1", "t2"} {
			require.NoError(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: key},
				sdk.Budget{USD: 0.05, Window: time.Hour, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}))
		}
		startWorker(t, b.worker)
		start := func(key string, steps int) uuid.UUID {
			run, err := sdk.Start(ctx, b.client, wf, steps, &sdk.StartOpts{FairnessKey: key})
			require.NoError(t, err)
			return run.ID
		}
		done := start("", 1) // under no budget: it completes
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, done).Status)
		a, other := start("t1", 2), start("t2", 2) // each tenant's 2nd step does not fit
		for _, id := range []uuid.UUID{a, other} {
			enginetest.WaitFor(t, "the task to wait over its budget", func() bool {
				w, ok := sdk.BudgetWaitOf(taskHistory(t, b.client, id))
				return ok && w.Budget != ""
			})
		}
		ids := func(l sdk.BudgetWaitList) []uuid.UUID {
			var out []uuid.UUID
			for _, w := range l.Tasks {
				out = append(out, w.Task.ID)
			}
			return out
		}
		all, err := b.client.BudgetWaits(ctx, "")
		require.NoError(t, err)
		require.False(t, all.Partial)
		require.ElementsMatch(t, []uuid.UUID{a, other}, ids(all))
		t1, err := b.client.BudgetWaits(ctx, "fairness_key:t1")
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{a}, ids(t1))
		w := t1.Tasks[0]
		require.Equal(t, "fairness_key:t1", w.Budget)
		require.NotNil(t, w.Window, "a scope budget's wait names its window")
		require.Equal(t, 1, w.Position)
		require.Equal(t, "llm", w.Step)
		require.InDelta(t, 0.04, w.CostUSD, 1e-9)
		require.InDelta(t, 0.03, w.SpentUSD, 1e-9)
		require.InDelta(t, 0.05, w.LimitUSD, 1e-9)
		require.True(t, w.Deadline.After(w.Since), "it waits until its deadline")
		require.Equal(t, "t1", w.Task.FairnessKey)

		_, err = b.client.BudgetWaits(ctx, "tenant:t1")
		require.ErrorIs(t, err, sdk.ErrInvalid)

		woken, err := b.client.RaiseBudget(ctx, "fairness_key:t1", sdk.BudgetRaise{USD: 0.05, By: "ops"})
		require.NoError(t, err)
		require.Equal(t, ids(t1), woken, "the raise woke the tasks listed")
		t1, err = b.client.BudgetWaits(ctx, "fairness_key:t1")
		require.NoError(t, err)
		require.Empty(t, t1.Tasks, "a woken task no longer waits")
		all, err = b.client.BudgetWaits(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{other}, ids(all))
	})
}
