package workflow_test

import (
	"context"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// Poll is what a poller carries from run to run.
type Poll struct {
	Seen  int // items handled so far, over every run
	Until int // stop after this many
}

// A poller that would outgrow its history continues as new every 100
// steps: each run's history stays short, and Result on the first run's id
// follows the chain to the last run's output.
func ExampleContinueAsNew() {
	poller := sdk.NewWorkflow("example.poller", 1, func(ctx workflow.Context, p Poll) (int, error) {
		for range 100 {
			n, err := workflow.Step(ctx, "poll", func(context.Context) (int, error) {
				return 1, nil // fetch and handle one item
			}, nil)
			if err != nil {
				return 0, err
			}
			p.Seen += n
		}
		if p.Seen < p.Until {
			return 0, workflow.ContinueAsNew(ctx, p) // a new run, a new history
		}
		return p.Seen, nil
	}, nil)
	run(poller, Poll{Until: 300})
	// Output: 300 <nil>
}
