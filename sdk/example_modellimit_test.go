package sdk_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// limitedSummary calls a model in one step, which declares what it may spend:
// under a limit on "gpt-4o" it waits its turn before it calls.
var limitedSummary = sdk.NewWorkflow("example.limited_summary", 1, func(ctx workflow.Context, doc string) (string, error) {
	return workflow.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
		// The model call goes here; report what it spent.
		activities.RecordUsage(ctx, activities.Usage{Model: "gpt-4o", InputTokens: 900, OutputTokens: 150})
		return "summary of " + doc, nil
	}, &workflow.StepOpts{Spend: &workflow.Spend{Model: "gpt-4o", Tokens: 1200}})
}, nil)

// A model limit holds every worker's steps that call the model to its
// tokens and requests per minute.
func ExampleClient_SetModelLimit() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, limitedSummary) })
	defer stop()
	ctx := context.Background()

	err := client.SetModelLimit(ctx, "gpt-4o", sdk.ModelLimit{TokensPerMinute: 20_000, RequestsPerMinute: 500})
	if err != nil {
		panic(err)
	}
	run, err := sdk.Start(ctx, client, limitedSummary, "report.pdf", nil)
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	limits, err := client.ModelLimits(ctx)
	for _, l := range limits {
		fmt.Println(l.Model, l.TokensPerMinute, l.RequestsPerMinute, err)
	}
	// Output:
	// summary of report.pdf <nil>
	// gpt-4o 20000 500 <nil>
}

// docs/model-limits.md shows lines of ExampleClient_SetModelLimit, in
// order.
func TestModelLimitsPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/model-limits.md", ".."); err != nil {
		t.Fatal(err)
	}
}
