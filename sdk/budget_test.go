package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// llmSpend is what each simulated LLM step declares, and llmUsage what
// it reports: 4,000 tokens for $0.04 declared, 3,000 for $0.03 spent.
var (
	llmSpend = &workflow.Spend{Model: "gpt-x", Tokens: 4000, CostUSD: 0.04}
	llmUsage = activities.Usage{Model: "gpt-x", InputTokens: 2000, OutputTokens: 1000, CostUSD: 0.03}
)

// llmSteps is a workflow of n simulated LLM steps, each declaring
// llmSpend and reporting llmUsage.
func llmSteps(name string, opts *sdk.WorkflowOpts) *sdk.Workflow[int, int] {
	if opts == nil {
		opts = &sdk.WorkflowOpts{}
	}
	opts.Retry = fastRetry(3)
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, n int) (int, error) {
		for i := range n {
			if _, err := workflow.Step(ctx, "llm", func(ctx context.Context) (int, error) {
				activities.RecordUsage(ctx, llmUsage)
				return i, nil
			}, &workflow.StepOpts{Spend: llmSpend}); err != nil {
				return 0, err
			}
		}
		return n, nil
	}, opts)
}

func ledger[P history.Payload](t *testing.T, c *sdk.Client, id uuid.UUID) []P {
	t.Helper()
	return eventsOf[P](taskHistory(t, c, id))
}

// A task's budget: each step reserves before it runs and settles after,
// in the ledger, on both stores; a step over it does not start, and the
// task fails permanently with budget_exhausted. Another tenant's work,
// under its own scope budget, goes on while one tenant's budget stops
// its next step.
func TestBudgetReservesSettlesAndRefuses(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		wf := llmSteps("budget.llm", nil)
		sdk.Register(b.worker, wf)
		// Two tenants under a scope budget of $0.10 an hour each, set
		// before the worker reads them (a worker's copy is at most a
		// second old).
		require.NoError(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "t1"}, sdk.Budget{USD: 0.10, Window: time.Hour}))
		require.NoError(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "t2"}, sdk.Budget{USD: 0.10, Window: time.Hour}))
		startWorker(t, b.worker)

		// Within its budget: 3 steps of $0.04 declared fit $0.15.
		res, err := sdk.Start(ctx, b.client, wf, 3, &sdk.StartOpts{Budget: &sdk.Budget{USD: 0.15}})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)
		reserved := ledger[history.BudgetReservedData](t, b.client, res.ID)
		settled := ledger[history.BudgetSettledData](t, b.client, res.ID)
		require.Len(t, reserved, 3)
		require.Len(t, settled, 3)
		require.Equal(t, "task:"+res.ID.String(), reserved[0].Budgets[0].Ref)
		require.Equal(t, 0.04, reserved[0].CostUSD)
		require.Equal(t, history.SettleStepCompleted, settled[2].Reason)
		require.Equal(t, int64(3000), settled[2].Tokens)
		require.Equal(t, 0.03, settled[2].CostUSD)

		// t1's task of 5 steps is stopped at its 4th (3 × $0.03 spent,
		// + $0.04 is over); t2's 2 steps go on.
		t1, err := sdk.Start(ctx, b.client, wf, 5, &sdk.StartOpts{FairnessKey: "t1"})
		require.NoError(t, err)
		t2, err := sdk.Start(ctx, b.client, wf, 2, &sdk.StartOpts{FairnessKey: "t2"})
		require.NoError(t, err)
		info := waitTask(t, b.client, t1.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, sdk.KindBudgetExhausted, info.LastError.Kind)
		require.Equal(t, history.Permanent, info.LastError.Class)
		refused := ledger[history.BudgetRefusedData](t, b.client, t1.ID)
		require.Len(t, refused, 1)
		require.Equal(t, 3, refused[0].Position, "the 4th step did not start")
		require.Equal(t, "fairness_key:t1", refused[0].Budget.Ref)
		require.NotNil(t, refused[0].Budget.Window)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, t2.ID).Status, "the other tenant's work goes on")

		budgets, err := b.client.Budgets(ctx)
		require.NoError(t, err)
		require.Len(t, budgets, 2)
		require.Equal(t, sdk.BudgetScope{FairnessKey: "t1"}, budgets[0].Scope)
		require.InDelta(t, 0.09, budgets[0].SpentUSD, 1e-9, "spent: the bound is the declared spend")
		require.LessOrEqual(t, budgets[0].SpentUSD, 0.10, "a step that keeps to its declared spend never passes the limit")
		require.Zero(t, budgets[0].ReservedUSD)
		require.InDelta(t, 0.06, budgets[1].SpentUSD, 1e-9)

		require.NoError(t, b.client.DeleteBudget(ctx, sdk.BudgetScope{FairnessKey: "t2"}))
		require.True(t, errors.Is(b.client.DeleteBudget(ctx, sdk.BudgetScope{FairnessKey: "t2"}), sdk.ErrNotFound))
	})
}

// Invalid budgets are refused at the edge with errors that say which
// bound, and nothing is written.
func TestBudgetArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	b := setupEmbedded(t, sdk.WorkerConfig{})
	ctx := context.Background()
	wf := llmSteps("budget.check", nil)
	for _, tc := range []struct {
		b    sdk.Budget
		want string
	}{
		{sdk.Budget{USD: 1, Window: 30 * time.Second}, "window 30s is outside 1m0s..8784h0m0s"},
		{sdk.Budget{Window: time.Hour}, "limits nothing"},
		{sdk.Budget{USD: -1, Window: time.Hour}, "not a finite number >= 0"},
		{sdk.Budget{USD: 1, Window: time.Hour, OnExhausted: "pray"}, `OnExhausted "pray"`},
	} {
		err := b.client.SetBudget(ctx, sdk.BudgetScope{}, tc.b)
		require.ErrorIs(t, err, sdk.ErrInvalid)
		require.ErrorContains(t, err, tc.want)
	}
	require.ErrorContains(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "a", Type: "b"}, sdk.Budget{USD: 1, Window: time.Hour}), "not both")
	_, err := sdk.Start(ctx, b.client, wf, 1, &sdk.StartOpts{Budget: &sdk.Budget{USD: 1, Window: time.Hour}})
	require.ErrorIs(t, err, sdk.ErrInvalid)
	require.ErrorContains(t, err, "Window must be 0")
	_, err = b.client.RaiseBudget(ctx, "namespace", sdk.BudgetRaise{USD: 1})
	require.ErrorContains(t, err, "By (who raises it) is required")
	_, err = b.client.RaiseBudget(ctx, "namespace", sdk.BudgetRaise{USD: 1, By: "ops"})
	require.ErrorIs(t, err, sdk.ErrNotFound)
	budgets, err := b.client.Budgets(ctx)
	require.NoError(t, err)
	require.Empty(t, budgets)
}

// A budget that waits: the task over it holds no worker slot, a raise
// resumes exactly the tasks waiting on it, and a wait past its timeout
// fails the task budget_exhausted.
func TestBudgetWaitRaiseAndTimeout(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		wf := llmSteps("budget.wait", nil)
		sdk.Register(b.worker, wf)
		for _, key := range []string{"t1", "t2"} {
			require.NoError(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: key},
				sdk.Budget{USD: 0.05, Window: time.Hour, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}))
		}
		// t3's wait times out at once.
		require.NoError(t, b.client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "t3"},
			sdk.Budget{USD: 0.05, Window: time.Hour, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Millisecond}))
		startWorker(t, b.worker)
		waiting := func(id uuid.UUID) {
			enginetest.WaitFor(t, "the task to wait over its budget", func() bool {
				return len(ledger[history.BudgetRefusedData](t, b.client, id)) > 0
			})
			info, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, history.StatusPending, info.Status, "waiting, on no worker")
		}
		// Each tenant's task: the 1st step fits, the 2nd ($0.03 + $0.04) does not.
		a, err := sdk.Start(ctx, b.client, wf, 2, &sdk.StartOpts{FairnessKey: "t1"})
		require.NoError(t, err)
		other, err := sdk.Start(ctx, b.client, wf, 2, &sdk.StartOpts{FairnessKey: "t2"})
		require.NoError(t, err)
		waiting(a.ID)
		waiting(other.ID)

		woken, err := b.client.RaiseBudget(ctx, "fairness_key:t1", sdk.BudgetRaise{USD: 0.05, By: "alice@example.com", Reason: "approved"})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{a.ID}, woken, "exactly the task waiting on it")
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, a.ID).Status)
		raised := ledger[history.BudgetRaisedData](t, b.client, a.ID)
		require.Len(t, raised, 1)
		require.Equal(t, "alice@example.com", raised[0].By)
		require.InDelta(t, 0.10, raised[0].LimitUSD, 1e-9)
		require.Empty(t, ledger[history.BudgetRaisedData](t, b.client, other.ID))
		info, err := b.client.Get(ctx, other.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status, "the other tenant's task still waits")

		// The ledger answers the audit questions: who allowed tenant t1
		// more, and what t1 spent (settled) in the window.
		audit := func(expr string) []sdk.AuditRecord {
			t.Helper()
			filter, err := sdk.CompileEventFilter(expr)
			require.NoError(t, err)
			var out []sdk.AuditRecord
			require.NoError(t, b.client.Audit(ctx, sdk.AuditParams{Filter: filter}, func(r sdk.AuditRecord) error {
				out = append(out, r)
				return nil
			}))
			return out
		}
		raises := audit(`event.type == "budget_raised" && event.data.budget.ref == "fairness_key:t1"`)
		require.Len(t, raises, 1)
		require.Equal(t, a.ID, raises[0].Task.ID)
		require.Equal(t, "alice@example.com", raises[0].Event.Payload.(history.BudgetRaisedData).By)
		var spent float64
		for _, r := range audit(`event.type == "budget_settled" && event.data.budgets.exists(b, b.ref == "fairness_key:t1")`) {
			spent += r.Event.Payload.(history.BudgetSettledData).CostUSD
		}
		require.InDelta(t, 2*llmUsage.CostUSD, spent, 1e-9, "t1's two steps")

		// A wait with a timeout that has passed when the task is next
		// claimed fails it.
		late, err := sdk.Start(ctx, b.client, wf, 2, &sdk.StartOpts{FairnessKey: "t3"})
		require.NoError(t, err)
		ended := waitTask(t, b.client, late.ID)
		require.Equal(t, history.StatusDeadLettered, ended.Status)
		require.Equal(t, sdk.KindBudgetExhausted, ended.LastError.Kind)
		refused := ledger[history.BudgetRefusedData](t, b.client, late.ID)
		require.Len(t, refused, 2)
		require.Equal(t, history.BudgetWait, refused[0].Action)
		require.Equal(t, history.BudgetFail, refused[1].Action, "past its deadline the wait fails")
	})
}

// Children inherit: a batch's budget covers its documents. Two children
// of one step each (4,000 tokens declared, 3,000 spent) under the
// batch's 6,000 tokens: the first runs, the second's step would take the
// batch's budget past it (3,000 + 4,000) and fails budget_exhausted.
func TestBudgetChildrenInheritTheBatchBudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		doc := llmSteps("budget.doc", &sdk.WorkflowOpts{SkipDeadLetter: true})
		batch := sdk.NewWorkflow("budget.batch", 1, func(ctx workflow.Context, n int) (int, error) {
			first, err := workflow.StartChild(ctx, doc, 1, nil).Result(ctx)
			if err != nil {
				return 0, err
			}
			_, err = workflow.StartChild(ctx, doc, 1, nil).Result(ctx)
			var ce *workflow.ChildError
			if errors.As(err, &ce) {
				return first, nil // the second child was stopped by the batch's budget
			}
			return 0, errors.New("the second child was not stopped")
		}, &sdk.WorkflowOpts{Retry: fastRetry(1)})
		sdk.Register(b.worker, doc)
		sdk.Register(b.worker, batch)
		startWorker(t, b.worker)

		res, err := sdk.Start(ctx, b.client, batch, 0, &sdk.StartOpts{Budget: &sdk.Budget{Tokens: 6000}})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)
		children := taskInfo(t, b.client, res.ID).children
		require.Len(t, children, 2)
		firstRes := ledger[history.BudgetReservedData](t, b.client, children[0])
		require.Len(t, firstRes, 1)
		require.Equal(t, "task:"+res.ID.String(), firstRes[0].Budgets[0].Ref, "the child reserves against its parent's budget")
		second := waitTask(t, b.client, children[1])
		require.Equal(t, history.StatusFailed, second.Status)
		require.Equal(t, sdk.KindBudgetExhausted, second.LastError.Kind)
		refused := ledger[history.BudgetRefusedData](t, b.client, children[1])
		require.Len(t, refused, 1)
		require.Equal(t, int64(3000), refused[0].SpentTokens, "the first child's spend counts against the batch")
	})
}

type batchView struct{ children []uuid.UUID }

func taskInfo(t *testing.T, c *sdk.Client, id uuid.UUID) batchView {
	t.Helper()
	var out batchView
	for _, e := range taskHistory(t, c, id) {
		if d, ok := e.Data.(history.ChildStartedData); ok {
			out.children = append(out.children, uuid.MustParse(d.ChildID))
		}
	}
	return out
}
