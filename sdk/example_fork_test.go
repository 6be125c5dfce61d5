package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// quote prices an order, then charges the price: two steps.
var quote = sdk.NewWorkflow("example.quote", 1, func(ctx workflow.Context, order string) (string, error) {
	cents, err := workflow.Step(ctx, "price", func(ctx context.Context) (int, error) {
		return 1200, nil // a pricing service that got it wrong
	}, nil)
	if err != nil {
		return "", err
	}
	return workflow.Step(ctx, "charge", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("%s charged %d", order, cents), nil
	}, nil)
}, nil)

// Fork re-runs a task from a step with a corrected output: the steps up
// to it are copied, never run again; the ones after it run on the
// corrected value.
func ExampleClient_Fork() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, quote) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, quote, "order-7", nil)
	if err != nil {
		panic(err)
	}
	out, _ := run.Result(ctx)
	fmt.Println(out)

	// Step 0 (price) gave the wrong price: fork there with the right one.
	forkID, err := client.Fork(ctx, run.ID, sdk.ForkOpts{At: 0, Output: json.RawMessage(`999`)})
	if err != nil {
		panic(err)
	}
	fixed, err := sdk.RunOf(client, quote, forkID).Result(ctx)
	fmt.Println(fixed, err)
	forks, _ := client.Forks(ctx, run.ID)
	fmt.Println(len(forks), forks[0].TaskID == forkID.String(), forks[0].Position)
	// Output:
	// order-7 charged 1200
	// order-7 charged 999 <nil>
	// 1 true 0
}

// docs/fork.md shows lines of ExampleClient_Fork, in order.
func TestForkPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/fork.md", ".."); err != nil {
		t.Fatal(err)
	}
}
