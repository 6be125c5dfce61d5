// Package mistyped starts a workflow with an input of another type than its
// input type: it must not build. It is welltyped with the inputs wrong.
package mistyped

import (
	"context"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

type Document struct{ ID string }

type Result struct{ Words int }

var process = sdk.NewWorkflow("document.process", 1,
	func(ctx workflow.Context, doc Document) (Result, error) { return Result{}, nil }, nil)

// Use starts the workflow.
func Use() {
	ctx := context.Background()
	client, err := sdk.NewClient(sdk.ClientConfig{})
	if err != nil {
		return
	}
	run, err := sdk.Start(ctx, client, process, "not a Document", nil)
	if err != nil {
		return
	}
	var out Result
	out, _ = run.Result(ctx)
	_ = out
	_ = sdk.StartEntry(process, 42, &sdk.StartOpts{Priority: 1})
}
