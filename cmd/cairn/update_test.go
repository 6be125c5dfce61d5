package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// TestCLITaskUpdate: `cairn task update` prints the handler's result,
// applies an update once under its --id, and says why one was refused.
func TestCLITaskUpdate(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			var s store.Store
			if i := slices.Index(tg.flags, "--db"); i >= 0 {
				opened, err := sqlitestore.Open(context.Background(), tg.flags[i+1])
				require.NoError(t, err)
				t.Cleanup(func() { _ = opened.Close() })
				s = opened
			} else {
				tg.withStore(t, func(st store.Store) { s = st })
			}
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: s, Namespace: "clitest", PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			sdk.Register(w, sdk.NewWorkflow("cli.updated", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
				owner := "ada"
				if err := workflow.SetUpdate(ctx, "hand-over", func(ctx workflow.Context, to string) (string, error) {
					prev := owner
					owner = to
					return prev, nil
				}, &workflow.UpdateOpts[string]{Validator: func(to string) error {
					if to == "" {
						return errors.New("hand over to whom?")
					}
					return nil
				}}); err != nil {
					return "", err
				}
				_, _, err := workflow.Receive[bool](ctx, "ok", time.Hour)
				return owner, err
			}, nil))
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

			out, _ := tg.mustRun(t, "task", "start", "cli.updated", "--input", "{}")
			id := strings.TrimSpace(out)
			waitForWait(t, tg, id)
			out, _ = tg.mustRun(t, "task", "update", id, "hand-over", "--args", `"grace"`, "--id", "h-1")
			require.Equal(t, "task "+id+": update hand-over (h-1) applied: \"ada\"\n", out)
			out, _ = tg.mustRun(t, "task", "update", id, "hand-over", "--args", `"linus"`, "--id", "h-1", "-o", "json")
			var res map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &res))
			require.Equal(t, true, res["duplicate"])
			require.Equal(t, "ada", res["output"])

			_, _, err = tg.run(t, "task", "update", id, "hand-over", "--args", `""`)
			require.ErrorIs(t, err, sdk.ErrUpdateRejected)
			require.ErrorContains(t, err, "hand over to whom?")
			_, _, err = tg.run(t, "task", "update", id, "take-over")
			require.ErrorIs(t, err, sdk.ErrUpdateNotFound)
			_, _, err = tg.run(t, "task", "update", id, "hand-over", "--args", "{")
			require.ErrorContains(t, err, "is not JSON")
			out, _ = tg.mustRun(t, "task", "history", id)
			require.Equal(t, 1, strings.Count(out, "update_accepted"), "%s", out)
		})
	}
}
