package console

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// The task page of a run of a workflow that continued as new links both
// ways along the chain: to the run it continues and to the one it
// continued as.
func TestTaskPageLinksTheChainBothWays(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			wf := sdk.NewWorkflow("console.chain", 1, func(ctx workflow.Context, n int) (int, error) {
				if n == 0 {
					return 0, workflow.ContinueAsNew(ctx, 1)
				}
				return n, nil
			}, nil)
			client, run := runToCompletion(t, ns.Store, wf, 0)
			first, err := client.Get(context.Background(), run.ID)
			require.NoError(t, err)
			require.Equal(t, history.StatusContinued, first.Status)
			require.NotNil(t, first.ContinuedAs)
			next := first.ContinuedAs.String()

			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `<a class="mono" id="task-continued-as" href="/console/tasks/`+next+`?namespace=default"`)
			require.NotContains(t, page, `id="task-continued-from"`, "the first run continues none")
			require.Contains(t, page, `status-continued`)
			page = getPage(t, h, "/console/tasks/"+next)
			require.Contains(t, page, `<a class="mono" id="task-continued-from" href="/console/tasks/`+run.ID.String()+`?namespace=default"`)
			require.NotContains(t, page, `id="task-continued-as"`, "the last run continued as none")
		})
	}
}
