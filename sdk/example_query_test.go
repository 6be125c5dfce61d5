package sdk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Progress is what the query "progress" of the reviewDoc workflow answers.
type Progress struct {
	Stage string
	Pages int
}

// reviewDoc reads a document, then waits for a person's approval; its query
// "progress" says where it is.
var reviewDoc = sdk.NewWorkflow("example.contract", 1, func(ctx workflow.Context, doc string) (string, error) {
	p := Progress{Stage: "reading"}
	err := workflow.SetQuery(ctx, "progress", func(struct{}) (Progress, error) { return p, nil })
	if err != nil {
		return "", err
	}
	p.Pages, err = workflow.Step(ctx, "read", func(ctx context.Context) (int, error) { return 12, nil }, nil)
	if err != nil {
		return "", err
	}
	p.Stage = "awaiting approval"
	if _, _, err := workflow.AwaitApproval(ctx, "approve", 24*time.Hour); err != nil {
		return "", err
	}
	p.Stage = "approved"
	return doc + " approved", nil
}, nil)

// A query reads a workflow's state from outside, as of the task's latest
// event: here while the task waits for its approval (no worker holds it),
// and once it has finished.
func ExampleClient_Query() {
	client, stop := examplekit.Embedded(func(w *sdk.Worker) { sdk.Register(w, reviewDoc) })
	defer stop()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, reviewDoc, "contract.pdf", nil)
	if err != nil {
		panic(err)
	}
	for info, _ := run.Info(ctx); info == nil || info.Waiting == nil; info, _ = run.Info(ctx) {
		time.Sleep(10 * time.Millisecond) // until it waits for its approval
	}
	var p Progress
	err = client.Query(ctx, run.ID, "progress", nil, &p)
	fmt.Println(p, err)

	_, err = client.Signal(ctx, run.ID, "approve", workflow.Decision{Approved: true}, nil)
	if err != nil {
		panic(err)
	}
	out, _ := run.Result(ctx)
	err = client.Query(ctx, run.ID, "progress", nil, &p)
	fmt.Println(out, p, err)
	// Output:
	// {awaiting approval 12} <nil>
	// contract.pdf approved {approved 12} <nil>
}

// docs/queries.md shows lines of ExampleClient_Query, in order.
func TestQueriesPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/queries.md", ".."); err != nil {
		t.Fatal(err)
	}
}
