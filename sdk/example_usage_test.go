package sdk_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// summarize is one document of a batch: a model call that reports what
// it spent.
var summarize = sdk.NewWorkflow("example.summarize", 1, func(ctx workflow.Context, pages int) (string, error) {
	return workflow.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
		activities.RecordUsage(ctx, activities.Usage{
			Model: "small", InputTokens: int64(1000 * pages), OutputTokens: 200, CostUSD: 0.25 * float64(pages),
		})
		return fmt.Sprintf("%d pages summarized", pages), nil
	}, nil)
}, nil)

// batch summarizes each document as a child, then writes a digest.
var batch = sdk.NewWorkflow("example.batch", 1, func(ctx workflow.Context, docs []int) (int, error) {
	if _, err := workflow.MapChildren(ctx, summarize, docs, nil); err != nil {
		return 0, err
	}
	_, err := workflow.Step(ctx, "digest", func(ctx context.Context) (string, error) {
		activities.RecordUsage(ctx, activities.Usage{Model: "large", InputTokens: 600, OutputTokens: 300, CostUSD: 1.5})
		return "digest", nil
	}, nil)
	return len(docs), err
}, nil)

// TaskUsage rolls a batch up from the histories: the parent's own usage
// plus each child's, and the namespace's spend over time by type.
func ExampleClient_TaskUsage() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) {
		sdk.Register(w, batch)
		sdk.Register(w, summarize)
	})
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, batch, []int{1, 2, 3}, &sdk.StartOpts{FairnessKey: "tenant-a"})
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}

	u, err := client.TaskUsage(ctx, run.ID, &sdk.TaskUsageOpts{Children: true})
	if err != nil {
		panic(err)
	}
	fmt.Printf("own $%.2f, with %d children $%.2f in %d tasks\n", u.Own.CostUSD, len(u.Children), u.Total.CostUSD, u.Tasks)
	for _, c := range u.Children {
		fmt.Printf("child %d: %d tokens, $%.2f\n", c.Position, c.Total.Tokens(), c.Total.CostUSD)
	}
	for _, m := range u.ByModel {
		fmt.Printf("%s: $%.2f\n", m.Model, m.CostUSD)
	}

	series, err := client.UsageSeries(ctx, sdk.UsageQuery{By: cairntype.UsageByType})
	if err != nil {
		panic(err)
	}
	for _, k := range series.Keys {
		fmt.Printf("%s: $%.2f over the last day\n", k.Key, k.Total.CostUSD)
	}
	// Output:
	// own $1.50, with 3 children $3.00 in 4 tasks
	// child 0: 1200 tokens, $0.25
	// child 1: 2200 tokens, $0.50
	// child 2: 3200 tokens, $0.75
	// large: $1.50
	// small: $1.50
	// example.summarize: $1.50 over the last day
	// example.batch: $1.50 over the last day
}

// docs/usage.md shows lines of ExampleClient_TaskUsage, in order.
func TestUsagePageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/usage.md", ".."); err != nil {
		t.Fatal(err)
	}
}
