package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A workflow waits for whichever comes first: a person's approval, an
// automated review (a child workflow), or a day. The decision is recorded,
// so every later run of the task takes the same branch.
func ExampleSelect() {
	review := sdk.NewWorkflow("example.review", 1, func(ctx workflow.Context, doc string) (string, error) {
		verdict, _, err := workflow.Receive[string](ctx, "verdict", time.Hour) // a slow reviewer
		return verdict, err
	}, nil)
	approve := sdk.NewWorkflow("example.approve", 1, func(ctx workflow.Context, doc string) (string, error) {
		checked := workflow.StartChild(ctx, review, doc, nil)
		var decision string
		_, err := workflow.Select(ctx,
			workflow.OnSignal("approval", func(by string) { decision = "approved by " + by }),
			workflow.OnChild(checked, func(verdict string, err error) { decision = "review says " + verdict }),
			workflow.OnTimer(24*time.Hour, func() { decision = "escalated" }),
		)
		return decision, err
	}, nil)

	client, stop := examplekit.Embedded(func(w *sdk.Worker) {
		sdk.Register(w, review)
		sdk.Register(w, approve)
	})
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, approve, "invoice-42", nil)
	if err != nil {
		panic(err)
	}
	if _, err := client.Signal(ctx, run.ID, "approval", "alice", nil); err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output:
	// approved by alice <nil>
}
