package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// spendingTask finishes a task of namespace clitest whose step reported
// usage, and returns its id.
func spendingTask(t *testing.T, tg cliTarget, key string, usage ...history.Usage) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	tg.withStore(t, func(s store.Store) {
		ctx := context.Background()
		res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "clitest", Scheduled: history.TaskScheduledData{
			TaskType: "cli.usage", TypeVersion: 1, Queue: "default", FairnessKey: key}})
		require.NoError(t, err)
		claimed, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "clitest", Queues: []string{"default"},
			Types: []store.TypeKey{{Type: "cli.usage", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed.Tasks, 1)
		c := claimed.Tasks[0]
		_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
			Attempt: c.State.Attempt, Payloads: []history.Payload{
				history.StepCompletedData{Position: 0, Name: "call", Usage: usage}, history.TaskCompletedData{}}})
		require.NoError(t, err)
		id = res.ID
	})
	return id
}

func TestCLIUsage(t *testing.T) {
	t.Parallel()
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			id := spendingTask(t, tg, "acme",
				history.Usage{Model: "small", InputTokens: 1200, OutputTokens: 300, CostUSD: 0.25},
				history.Usage{Model: "large", InputTokens: 10, OutputTokens: 5, CostUSD: 1})
			spendingTask(t, tg, "", history.Usage{Model: "small", InputTokens: 1, OutputTokens: 1, CostUSD: 0.5})

			out, _ := tg.mustRun(t, "usage", "task", id.String(), "--children")
			require.Contains(t, out, "fairness key acme")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Equal(t, []string{"own", "1210", "305", "$1.2500"}, strings.Fields(lines[2]), out)
			require.Equal(t, []string{"with", "children", "(1", "tasks)", "1210", "305", "$1.2500"}, strings.Fields(lines[3]), out)
			require.Equal(t, []string{"large", "10", "5", "$1.0000"}, strings.Fields(lines[4]), out)

			out, _ = tg.mustRun(t, "usage", "task", id.String(), "-o", "json")
			var u cairntype.TaskUsage
			require.NoError(t, json.Unmarshal([]byte(out), &u), out)
			require.Equal(t, cairntype.UsageTotal{InputTokens: 1210, OutputTokens: 305, CostUSD: 1.25, Reports: 2}, u.Total)
			require.False(t, u.WithChildren)

			out, _ = tg.mustRun(t, "usage", "by", "tenant", "--since", "2h", "--step", "1h")
			require.Contains(t, out, "FAIRNESS_KEY")
			var totals []string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[1] == "total" {
					totals = append(totals, strings.Join(f, " "))
				}
			}
			require.Equal(t, []string{"acme total 2 1210 305 $1.2500", "(none) total 1 1 1 $0.5000"}, totals, out)

			out, _ = tg.mustRun(t, "usage", "by", "model", "-o", "json")
			var s cairntype.UsageSeries
			require.NoError(t, json.Unmarshal([]byte(out), &s), out)
			require.Equal(t, cairntype.UsageByModel, s.By)
			require.Equal(t, 1.75, s.Total.CostUSD)
			require.Equal(t, "large", s.Keys[0].Key)

			_, _, err := tg.run(t, "usage", "by", "colour")
			require.ErrorContains(t, err, `cairn usage by "colour": use tenant, model or type`)
			_, _, err = tg.run(t, "usage", "by", "model", "--step", "1s")
			require.ErrorContains(t, err, "step 1s must be between 1m0s and 744h0m0s")
			_, _, err = tg.run(t, "usage", "task", "nope")
			require.ErrorContains(t, err, `task id "nope" is not a UUID`)
		})
	}
}
