package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// TestCLITaskQuery: `cairn task query` prints a waiting task's answer,
// passes --args, and says what was wrong with an unknown query.
func TestCLITaskQuery(t *testing.T) {
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
			sdk.Register(w, sdk.NewWorkflow("cli.asked", 1, func(ctx workflow.Context, _ struct{}) (bool, error) {
				stage := "waiting"
				if err := workflow.SetQuery(ctx, "stage", func(who string) (string, error) { return stage + " for " + who, nil }); err != nil {
					return false, err
				}
				ok, _, err := workflow.Receive[bool](ctx, "ok", time.Hour)
				return ok, err
			}, nil))
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

			out, _ := tg.mustRun(t, "task", "start", "cli.asked", "--input", "{}")
			id := strings.TrimSpace(out)
			waitForWait(t, tg, id)
			out, _ = tg.mustRun(t, "task", "query", id, "stage", "--args", `"ada"`)
			require.Equal(t, "\"waiting for ada\"\n", out)
			out, _ = tg.mustRun(t, "task", "query", id, "stage", "-o", "json")
			var res map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &res))
			require.Equal(t, "waiting for ", res["answer"])

			_, _, err = tg.run(t, "task", "query", id, "progress")
			require.ErrorIs(t, err, sdk.ErrQueryNotFound)
			require.ErrorContains(t, err, `"stage"`)
			_, _, err = tg.run(t, "task", "query", id, "stage", "--args", "{")
			require.ErrorContains(t, err, "is not JSON")
		})
	}
}
