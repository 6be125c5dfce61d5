package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// seedCompleted starts a task of cli.test and completes it with two
// steps, as a worker would, and returns its id.
func seedCompleted(t *testing.T, tg cliTarget) uuid.UUID {
	t.Helper()
	seedTasks(t, tg, 1)
	var id uuid.UUID
	tg.withStore(t, func(s store.Store) {
		ctx := context.Background()
		res, err := s.TaskClaim(ctx, &store.TaskClaimParams{
			Namespace: "clitest", Queues: []string{"default"}, Types: []store.TypeKey{{Type: "cli.test", Version: 1}},
			Owner: "cli-test", Max: 1, LeaseTTL: time.Hour,
		})
		require.NoError(t, err)
		require.Len(t, res.Tasks, 1)
		c := res.Tasks[0]
		id = c.Task.ID
		_, err = s.EventAppend(ctx, &store.EventAppendParams{
			TaskID: id, State: c.State, Epoch: c.State.Lease.Epoch, Attempt: c.State.Attempt,
			Payloads: []history.Payload{
				history.StepCompletedData{Position: 0, Name: "fetch", Output: json.RawMessage(`{"rate":1.5}`)},
				history.StepCompletedData{Position: 1, Name: "convert", Output: json.RawMessage(`15`)},
				history.TaskCompletedData{Output: json.RawMessage(`15`)},
			},
		})
		require.NoError(t, err)
	})
	return id
}

// cairn task fork prints the new task's id; task show and task history
// name the fork and the original; what cannot be forked is refused with
// what was wrong; cairn task reset forks and ends the original. On both
// stores.
func TestCLIForkAndReset(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			id := seedCompleted(t, tg)

			out, _ := tg.mustRun(t, "task", "fork", id.String(), "--at", "0", "--step-output", `{"rate":2}`)
			forkID, err := uuid.Parse(strings.TrimSpace(out))
			require.NoError(t, err, "prints the new id: %q", out)

			out, _ = tg.mustRun(t, "task", "show", forkID.String())
			require.Contains(t, out, "forked from:")
			require.Contains(t, out, "task "+id.String()+" at step 0")
			out, _ = tg.mustRun(t, "task", "show", id.String())
			require.Contains(t, out, "fork:")
			require.Contains(t, out, "task "+forkID.String()+" at step 0")
			out, _ = tg.mustRun(t, "task", "show", id.String(), "-o", "json")
			var shown struct {
				Status history.Status `json:"status"`
				Forks  []history.Fork `json:"forks"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &shown))
			require.Equal(t, []history.Fork{{TaskID: forkID.String(), Position: 0}}, shown.Forks)
			require.Equal(t, history.StatusCompleted, shown.Status)

			out, _ = tg.mustRun(t, "task", "history", forkID.String())
			require.Contains(t, out, "forked from task "+id.String()+" at step 0")
			require.Contains(t, out, "step 0 fetch (copied from event 3 of the original)")
			out, _ = tg.mustRun(t, "task", "history", id.String())
			require.Contains(t, out, "task_forked")
			require.Contains(t, out, "forked as task "+forkID.String()+" at step 0")
			out, _ = tg.mustRun(t, "task", "history", forkID.String(), "-o", "json")
			require.Contains(t, out, `"rate": 2`)
			require.Contains(t, out, `"copied_from_seq": 3`)

			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"task", "fork", id.String()}, "--at is required"},
				{[]string{"task", "fork", id.String(), "--at", "2"}, "it has 2 steps on record (positions 0 to 1)"},
				{[]string{"task", "fork", id.String(), "--at", "1", "--step-output", "{"}, "--step-output is not valid JSON"},
				{[]string{"task", "fork", "not-a-uuid", "--at", "1"}, "is not a UUID"},
				{[]string{"task", "fork", uuid.Must(uuid.NewV7()).String(), "--at", "0"}, "not found"},
			} {
				_, _, err := tg.run(t, tc.args...)
				require.Error(t, err, "%v", tc.args)
				require.Contains(t, err.Error(), tc.want, "%v", tc.args)
			}

			// Reset of the pending fork: forked again, and the fork
			// cancelled.
			out, _ = tg.mustRun(t, "task", "reset", forkID.String(), "--at", "0", "--reason", "again")
			second, err := uuid.Parse(strings.TrimSpace(out))
			require.NoError(t, err, "prints the new id: %q", out)
			out, _ = tg.mustRun(t, "task", "show", second.String())
			require.Contains(t, out, "task "+forkID.String()+" at step 0")
			out, _ = tg.mustRun(t, "task", "show", forkID.String())
			require.Contains(t, out, "cancelled")

			out, _ = tg.mustRun(t, "task", "fork", "--help")
			require.Contains(t, out, "--at")
			require.Contains(t, out, "never run again")
			out, _ = tg.mustRun(t, "task", "reset", "--help")
			require.Contains(t, out, "--compensate")
		})
	}
}

// The global -o/--output works on fork and reset: the step's output is
// --step-output, which shadows nothing.
func TestCLIForkTakesGlobalOutput(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			id := seedCompleted(t, tg)
			out, _ := tg.mustRun(t, "-o", "json", "task", "fork", id.String(), "--at", "0", "--step-output", `{"rate":3}`)
			_, err := uuid.Parse(strings.TrimSpace(out))
			require.NoError(t, err, "prints the new id with -o json: %q", out)
		})
	}
}

// A reset that wrote the fork but failed to end the original prints the
// fork's id, then fails: a retry without a key would fork again.
func TestCLIResetFailurePrintsTheFork(t *testing.T) {
	t.Parallel()
	fork := uuid.Must(uuid.NewV7())
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	err := reportFork(cmd, uuid.Must(uuid.NewV7()), fork, errors.New("cancel failed"), "default")
	require.ErrorContains(t, err, "the fork "+fork.String()+" was written")
	require.ErrorContains(t, err, "cancel failed")
	require.Equal(t, fork.String()+"\n", out.String())

	out.Reset()
	require.Error(t, reportFork(cmd, uuid.Must(uuid.NewV7()), uuid.Nil, errors.New("refused"), "default"))
	require.Empty(t, out.String(), "no fork, no id")
}
