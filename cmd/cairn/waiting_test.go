package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// A task whose workflow waits for a signal is shown pending with what
// it waits for, until when: task show, task list and their JSON. Before,
// it read "pending" only.
func TestCLITaskShowsWhatAPendingTaskWaitsFor(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			deadline := time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC)
			var id uuid.UUID
			tg.withStore(t, func(s store.Store) {
				ctx := context.Background()
				res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "clitest",
					Scheduled: history.TaskScheduledData{TaskType: "cli.wait", TypeVersion: 1, Queue: "default"}})
				require.NoError(t, err)
				id = res.ID
				claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "clitest", Queues: []string{"default"},
					Types: []store.TypeKey{{Type: "cli.wait", Version: 1}}, Owner: "w1", Max: 1, LeaseTTL: time.Minute})
				claimed := claimedRes.Tasks
				require.NoError(t, err)
				require.Len(t, claimed, 1)
				ct := claimed[0]
				_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
					Payloads: []history.Payload{history.WaitStartedData{Name: "approval", Position: 0, Deadline: deadline}}})
				require.NoError(t, err)
			})
			out, _ := tg.mustRun(t, "task", "show", id.String())
			require.Regexp(t, `(?m)^status:\s+pending \(waiting for signal "approval" until 2999-01-02 03:04:05\.000 UTC\)$`, out)
			out, _ = tg.mustRun(t, "task", "list")
			require.Regexp(t, regexp.QuoteMeta(id.String())+`\s+cli\.wait@1\s+pending \(waiting for signal "approval"\)\s+1\s`, out)

			out, _ = tg.mustRun(t, "task", "show", id.String(), "-o", "json")
			var shown struct {
				Status  string          `json:"status"`
				Waiting json.RawMessage `json:"waiting"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &shown))
			require.Equal(t, "pending", shown.Status)
			require.JSONEq(t, `{"kind":"signal","name":"approval","deadline":"2999-01-02T03:04:05Z"}`, string(shown.Waiting))
		})
	}
}
