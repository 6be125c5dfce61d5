package console

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// A fork's page links to its original and shows the two runs' step
// outputs side by side, the differing ones marked; the original's page
// links to the fork.
func TestTaskPageShowsTheBranch(t *testing.T) {
	t.Parallel()
	st := servertest.LiteStore(t)
	wf := sdk.NewWorkflow("console.fork", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
		n, err := workflow.Step(ctx, "count", func(context.Context) (int, error) { return 2, nil }, nil)
		if err != nil {
			return 0, err
		}
		if _, err := workflow.Step(ctx, "double", func(context.Context) (int, error) { return 2 * n, nil }, nil); err != nil {
			return 0, err
		}
		return workflow.Step(ctx, "label", func(context.Context) (int, error) { return 7, nil }, nil)
	}, nil)
	client, run := runToCompletion(t, st, wf, struct{}{})
	ctx := context.Background()
	forkID, err := client.Fork(ctx, run.ID, sdk.ForkOpts{At: 0, Output: json.RawMessage(`5`)})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := client.Wait(wctx, forkID)
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, info.Status)

	h := testConsole(t, st)
	page := getPage(t, h, "/console/tasks/"+forkID.String())
	require.Contains(t, page, `id="task-forked-from" href="/console/tasks/`+run.ID.String()+`?namespace=default"`)
	require.Contains(t, page, `id="task-fork-diff"`)
	require.Contains(t, page, "2 of 3 positions differ", "count (edited) and double differ, label is the same")
	require.Equal(t, 2, strings.Count(page, `class="fork-step differs"`))
	require.Contains(t, page, `<td><pre>10</pre></td>`, "the fork's double saw the edited count")

	orig := getPage(t, h, "/console/tasks/"+run.ID.String())
	require.Contains(t, orig, `id="task-forks"`)
	require.Contains(t, orig, `href="/console/tasks/`+forkID.String()+`?namespace=default"`)
	require.NotContains(t, orig, `id="task-fork-diff"`)
}
