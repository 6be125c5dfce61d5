package main

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// seedDeadLetters starts n tasks and dead-letters each, as a worker whose
// attempt failed for good would.
func seedDeadLetters(t *testing.T, tg cliTarget, n int) {
	t.Helper()
	seedTasks(t, tg, n)
	tg.withStore(t, func(s store.Store) {
		ctx := context.Background()
		claimed, err := s.TaskClaimMany(ctx, &store.TaskClaimManyParams{
			Namespace: "clitest", Queues: []string{"default"}, Types: []store.TypeKey{{Type: "cli.test", Version: 1}},
			Owner: "cli-test", Max: n, LeaseTTL: time.Hour,
		})
		require.NoError(t, err)
		require.Len(t, claimed, n)
		for _, c := range claimed {
			_, err := s.EventAppend(ctx, &store.EventAppendParams{
				TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch, Attempt: c.State.Attempt,
				Payloads: []history.Payload{history.TaskDeadLetteredData{Reason: "permanent error",
					Error: history.ErrorInfo{Class: history.Permanent, Message: "boom"}}},
			})
			require.NoError(t, err)
		}
	})
}

func TestCLIDLQListSaysWhenTheLimitCutsItShort(t *testing.T) {
	tg := cliTargets["embedded"](t)
	seedDeadLetters(t, tg, 7)

	out, errOut := tg.mustRun(t, "dlq", "list", "--limit", "3", "-o", "json")
	require.Len(t, jsonIDs(t, out), 3)
	require.Equal(t, "stopped at --limit 3: more dead letters match (--limit -1 for all)\n", errOut)
	out, errOut = tg.mustRun(t, "dlq", "list", "--limit", "3")
	require.Len(t, tableIDs(t, out), 3)
	require.Contains(t, errOut, "stopped at --limit 3")

	for _, limit := range []string{"7", "-1"} {
		out, errOut = tg.mustRun(t, "dlq", "list", "--limit", limit, "-o", "json")
		ids := jsonIDs(t, out)
		require.Len(t, ids, 7, "--limit %s", limit)
		require.NotContains(t, ids, uuid.Nil)
		require.Empty(t, errOut, "--limit %s: nothing left out", limit)
	}
}
