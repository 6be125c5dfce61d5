package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// chainTask is the part of a task's JSON a chain of runs shows.
type chainTask struct {
	ID            uuid.UUID      `json:"id"`
	Status        history.Status `json:"status"`
	Output        json.RawMessage
	ContinuedFrom *uuid.UUID `json:"continued_from"`
	ContinuedAs   *uuid.UUID `json:"continued_as"`
}

// A workflow that continued as new twice: each run's JSON names its
// neighbours (continued_from, continued_as), and the long poll on the
// first id answers the chain's last run.
func TestTaskJSONShowsTheChainAndWaitFollowsIt(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			st := ns.Store
			wf := sdk.NewWorkflow("chain.count", 1, func(ctx workflow.Context, n int) (int, error) {
				if n < 2 {
					return 0, workflow.ContinueAsNew(ctx, n+1)
				}
				return n * 100, nil
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, PollInterval: 50 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(w, wf)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
			client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			srv, err := server.New(server.Config{Store: st})
			require.NoError(t, err)
			h := srv.Handler()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := sdk.Start(ctx, client, wf, 0, nil)
			require.NoError(t, err)

			get := func(path string) chainTask {
				t.Helper()
				a := servertest.Send(t, h, "GET", path, nil)
				require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
				var task chainTask
				require.NoError(t, json.Unmarshal(a.Body, &task))
				return task
			}
			last := get("/v1/tasks/" + run.ID.String() + "/wait?timeout=30s")
			require.Equal(t, history.StatusCompleted, last.Status)
			require.JSONEq(t, `200`, string(last.Output))
			require.NotEqual(t, run.ID, last.ID, "the answer is the chain's last run")

			first := get("/v1/tasks/" + run.ID.String())
			require.Equal(t, history.StatusContinued, first.Status)
			require.Nil(t, first.ContinuedFrom)
			require.NotNil(t, first.ContinuedAs)
			second := get("/v1/tasks/" + first.ContinuedAs.String())
			require.Equal(t, run.ID, *second.ContinuedFrom)
			require.Equal(t, last.ID, *second.ContinuedAs)
			third := get("/v1/tasks/" + last.ID.String())
			require.Equal(t, second.ID, *third.ContinuedFrom)
			require.Nil(t, third.ContinuedAs)
		})
	}
}

// A cancel on a chain's first run answers the run it cancelled, the
// chain's current one, not the first (continued).
func TestCancelOnAChainAnswersTheRunCancelled(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			st := ns.Store
			wf := sdk.NewWorkflow("chain.idle", 1, func(ctx workflow.Context, n int) (int, error) {
				if n == 0 {
					return 0, workflow.ContinueAsNew(ctx, 1)
				}
				_, _, err := workflow.Receive[string](ctx, "never", time.Hour)
				return n, err
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, PollInterval: 50 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(w, wf)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
			client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			srv, err := server.New(server.Config{Store: st})
			require.NoError(t, err)
			h := srv.Handler()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := sdk.Start(ctx, client, wf, 0, nil)
			require.NoError(t, err)
			var second uuid.UUID
			require.Eventually(t, func() bool {
				info, err := client.Get(ctx, run.ID)
				if err != nil || info.ContinuedAs == nil {
					return false
				}
				second = *info.ContinuedAs
				return true
			}, 30*time.Second, 5*time.Millisecond)

			a := servertest.Send(t, h, "POST", "/v1/tasks/"+run.ID.String()+"/cancel", []byte(`{}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			var task chainTask
			require.NoError(t, json.Unmarshal(a.Body, &task))
			require.Equal(t, second, task.ID, "the answer is the run the cancel reached")
			require.NotEqual(t, history.StatusContinued, task.Status)
			require.Equal(t, run.ID, *task.ContinuedFrom)
		})
	}
}
