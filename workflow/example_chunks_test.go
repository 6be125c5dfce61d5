package workflow_test

import (
	"context"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

type evalCase struct {
	Prompt string `json:"prompt"`
}

type evalScore struct {
	Score float64 `json:"score"`
}

// A batch of 100,000 evaluations: one child per case, in chunks of 1,000.
// The batch's history holds its 100 chunks, each chunk's its 1,000 cases;
// a flat MapChildren of 100,000 would outgrow MaxHistoryEvents.
func ExampleMapChunks() {
	evalOne := sdk.NewWorkflow("eval.case", 1, func(ctx workflow.Context, c evalCase) (evalScore, error) {
		return workflow.Step(ctx, "score", func(context.Context) (evalScore, error) {
			return evalScore{Score: float64(len(c.Prompt))}, nil // call the model here
		}, nil)
	}, nil)
	// The chunk type: MapChildren of eval.case over its cases, at most
	// 200 running at once per chunk.
	chunk := sdk.NewWorkflow("eval.chunk", 1, workflow.Chunk(evalOne, nil), &sdk.WorkflowOpts{MaxRunningChildren: 200})
	batch := sdk.NewWorkflow("eval.batch", 1, func(ctx workflow.Context, cases []evalCase) (float64, error) {
		scores, err := workflow.MapChunks(ctx, chunk, cases, 1_000, nil)
		if err != nil {
			return 0, err
		}
		var sum float64
		for _, s := range scores {
			sum += s.Score
		}
		return sum / float64(len(scores)), nil
	}, &sdk.WorkflowOpts{MaxRunningChildren: 10}) // 10 chunks at once: up to 2,000 cases running
	// Register all three on the worker; start eval.batch with the cases.
	_, _, _ = evalOne, chunk, batch
}
