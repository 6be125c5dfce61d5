package main

import (
	"context"
	"strings"
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
		claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{
			Namespace: "clitest", Queues: []string{"default"}, Types: []store.TypeKey{{Type: "cli.test", Version: 1}},
			Owner: "cli-test", Max: n, LeaseTTL: time.Hour,
		})
		claimed := claimedRes.Tasks
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

// TestCLIFiltersAreBounded: `cairn dlq list`, `cairn dlq retry` and
// `cairn audit` stop a filter over its limits with
// what was exceeded (-o json too), and --filter-* change the limits.
func TestCLIFiltersAreBounded(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			seedDeadLetters(t, tg, 5)
			l := "[" + strings.TrimSuffix(strings.Repeat("1,", 100), ",") + "]"
			cube := l + ".all(x, " + l + ".all(y, " + l + ".all(z, x + y + z >= 0)))"
			for _, args := range [][]string{
				{"dlq", "list", "--filter", cube},
				{"dlq", "list", "--filter", cube, "-o", "json"},
				{"dlq", "retry", "--filter", cube},
				{"audit", `event.seq >= 0 && ` + cube, "--since", "1h"},
			} {
				_, _, err := tg.run(t, args...)
				require.Error(t, err, "%v", args[:2])
				require.Contains(t, err.Error(), "filter too expensive: ", "%v", args[:2])
			}
			_, _, err := tg.run(t, "dlq", "list", "--filter", `task.type == "cli.test"`, "--filter-max-scan", "2")
			require.Error(t, err)
			require.Contains(t, err.Error(), "the request read its limit of 2 rows")
			// the limits' own check
			_, _, err = tg.run(t, "dlq", "list", "--filter-timeout", "-1s")
			require.Error(t, err)
			require.Contains(t, err.Error(), "must not be negative")
		})
	}
}
