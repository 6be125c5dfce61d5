package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
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

// A fork re-encodes its copies, so a copy over the blob threshold is a
// blob of its own: the diff compares blobs by their digest, not their
// keys, and an output in place with a blob of its bytes by digest too.
func TestForkDiffComparesBlobsByDigest(t *testing.T) {
	t.Parallel()
	out := json.RawMessage(`{"n":1}`)
	sum := sha256.Sum256(out)
	digest := hex.EncodeToString(sum[:])
	ref := func(key, sha string) history.Step {
		return history.Step{Name: "a", OutputRef: &history.BlobRef{Store: "db", Key: key, Size: 7, SHA256: sha}}
	}
	require.True(t, sameOutput(ref("k1", digest), ref("k2", digest)), "the same bytes under two keys")
	require.False(t, sameOutput(ref("k1", digest), ref("k2", "00")))
	require.True(t, sameOutput(history.Step{Output: out}, ref("k2", digest)))
	require.False(t, sameOutput(ref("k1", ""), ref("k2", "")), "no digest: not known the same")
	require.True(t, sameOutput(history.Step{Output: json.RawMessage(`{"n": 1}`)}, history.Step{Output: out}))
}

// The diff shows the first consoleDiffPositions positions, and says it
// is cut short when the runs hold more.
func TestForkDiffIsBounded(t *testing.T) {
	t.Parallel()
	steps := []historytest.E{historytest.Scheduled(), historytest.Started(1, 1)}
	for pos := range consoleDiffPositions + 50 {
		steps = append(steps, historytest.Step(1, pos, "s"))
	}
	events := historytest.Build(steps...)
	d := buildForkDiff(events, events, 0)
	require.Len(t, d.Rows, consoleDiffPositions)
	require.True(t, d.Cut)
	short := buildForkDiff(events[:10], events[:10], 0)
	require.False(t, short.Cut)
}
