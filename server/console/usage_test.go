package console

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// A batch run by a real worker: the parent's page shows its own cost,
// the batch's (its own plus every child's) and each child's on its row;
// a child's page shows its own.
func TestTaskPageShowsABatchsCost(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			doc := sdk.NewWorkflow("console.doc", 1, func(ctx workflow.Context, n int) (int, error) {
				return workflow.Step(ctx, "summarize", func(ctx context.Context) (int, error) {
					activities.RecordUsage(ctx, activities.Usage{Model: "small", InputTokens: int64(100 * n), OutputTokens: 10, CostUSD: 0.25 * float64(n)})
					return n, nil
				}, nil)
			}, nil)
			batch := sdk.NewWorkflow("console.batch", 1, func(ctx workflow.Context, docs []int) (int, error) {
				if _, err := workflow.Step(ctx, "plan", func(ctx context.Context) (int, error) {
					activities.RecordUsage(ctx, activities.Usage{Model: "large", InputTokens: 50, OutputTokens: 50, CostUSD: 1})
					return 0, nil
				}, nil); err != nil {
					return 0, err
				}
				_, err := workflow.MapChildren(ctx, doc, docs, nil)
				return len(docs), err
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: ns.Store, Concurrency: 4, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(w, doc)
			sdk.Register(w, batch)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
			client, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := sdk.Start(ctx, client, batch, []int{1, 2, 4}, nil)
			require.NoError(t, err)
			_, err = run.Result(ctx)
			require.NoError(t, err)

			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `<dd id="task-cost">100 tokens · $1.0000</dd>`)
			require.Contains(t, page, `<dd id="task-batch-cost">830 tokens · $2.7500 over 4 tasks</dd>`)
			kids := panelChildren(t, page)
			require.Len(t, kids, 3)
			for i, want := range []string{"$0.2500", "$0.5000", "$1.0000"} {
				require.Equal(t, want, kids[i].Cost, "child %d", i)
			}
			child := getPage(t, h, kids[2].Href)
			require.Contains(t, child, `<dd id="task-cost">410 tokens · $1.0000</dd>`)
			require.NotContains(t, child, `id="task-batch-cost"`, "a task without children has no batch")
		})
	}
}
