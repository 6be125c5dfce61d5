package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A query handler reads the body's variables: here how many of a batch's
// items are done, as of the task's latest event.
func ExampleSetQuery() {
	batch := sdk.NewWorkflow("example.batch", 1, func(ctx workflow.Context, items []string) (int, error) {
		done := 0
		if err := workflow.SetQuery(ctx, "done", func(struct{}) (string, error) {
			return fmt.Sprintf("%d of %d", done, len(items)), nil
		}); err != nil {
			return 0, err
		}
		for _, item := range items {
			if _, err := workflow.Step(ctx, "process "+item, func(context.Context) (bool, error) { return true, nil }, nil); err != nil {
				return 0, err
			}
			done++
		}
		// Wait for a go-ahead before reporting.
		if _, _, err := workflow.Receive[bool](ctx, "report", time.Hour); err != nil {
			return 0, err
		}
		return done, nil
	}, nil)
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, batch) })
	defer stop()
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, batch, []string{"a", "b", "c"}, nil)
	if err != nil {
		panic(err)
	}
	for info, _ := run.Info(ctx); info == nil || info.Waiting == nil; info, _ = run.Info(ctx) {
		time.Sleep(10 * time.Millisecond) // until it waits for "report"
	}
	var done string
	err = client.Query(ctx, run.ID, "done", nil, &done)
	fmt.Println(done, err)
	// Output:
	// 3 of 3 <nil>
}
