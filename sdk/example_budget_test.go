package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// summarizePages runs one model call a page: each declares it may spend 1,200
// tokens and $0.012, and reports 1,000 tokens for $0.01.
var summarizePages = sdk.NewWorkflow("example.summarize_pages", 1, func(ctx workflow.Context, pages int) (int, error) {
	tokens := 0
	for range pages {
		n, err := workflow.Step(ctx, "summarize", func(ctx context.Context) (int, error) {
			activities.RecordUsage(ctx, activities.Usage{Model: "gpt-x", InputTokens: 900, OutputTokens: 100, CostUSD: 0.01})
			return 1000, nil
		}, &workflow.StepOpts{Spend: &workflow.Spend{Model: "gpt-x", Tokens: 1200, CostUSD: 0.012}})
		if err != nil {
			return 0, err
		}
		tokens += n
	}
	return tokens, nil
}, nil)

// A tenant's budget of 3 cents an hour, whose action is to fail: the
// tenant's task is stopped at the step that would take the budget past
// its limit, and fails permanently with the kind budget_exhausted.
func ExampleClient_SetBudget() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, summarizePages) })
	defer stop()
	ctx := context.Background()

	err := client.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "acme"}, sdk.Budget{USD: 0.03, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	run, err := sdk.Start(ctx, client, summarizePages, 5, &sdk.StartOpts{FairnessKey: "acme"})
	if err != nil {
		panic(err)
	}
	_, err = run.Result(ctx)
	var te *sdk.TaskError
	if errors.As(err, &te) {
		fmt.Println(te.Status, te.Kind == sdk.KindBudgetExhausted)
	}
	budgets, _ := client.Budgets(ctx)
	fmt.Printf("%s spent $%.2f of $%.2f\n", budgets[0].Ref, budgets[0].SpentUSD, budgets[0].Budget.USD)
	// Output:
	// dead_lettered true
	// fairness_key:acme spent $0.02 of $0.03
}

// A task's budget whose action is to wait: over it, the task waits for a
// person, holding no worker slot; a raise resumes it at the step that
// was refused.
func ExampleClient_RaiseBudget() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, summarizePages) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, summarizePages, 3, &sdk.StartOpts{
		Budget: &sdk.Budget{USD: 0.02, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour},
	})
	if err != nil {
		panic(err)
	}
	for info, _ := run.Info(ctx); info == nil || info.Attempt == 0 || info.Status != history.StatusPending; info, _ = run.Info(ctx) {
		time.Sleep(10 * time.Millisecond) // until it waits over its budget
	}
	woken, err := client.RaiseBudget(ctx, "task:"+run.ID.String(), sdk.BudgetRaise{USD: 0.02, By: "alice@example.com", Reason: "a long contract"})
	fmt.Println(len(woken), err)
	out, err := run.Result(ctx)
	fmt.Println(out, err)
	// Output:
	// 1 <nil>
	// 3000 <nil>
}

// docs/budgets.md shows lines of the budget examples, in order.
func TestBudgetsPageShowsTheExamples(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/budgets.md", ".."); err != nil {
		t.Fatal(err)
	}
}
