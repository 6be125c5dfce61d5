package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cairnflow/cairn/workflow"
)

// TestUpdateEndpoints: an update to a waiting task over HTTP, validated by
// a worker's replay: rejected (422, nothing written), unknown (404),
// accepted with the handler's result (200), retried with its id (200,
// duplicate), polled, and refused once the task finished (409).
func TestUpdateEndpoints(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			ctx := context.Background()
			wf := sdk.NewWorkflow("update.http", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
				limit := 1
				if err := workflow.SetUpdate(ctx, "raise", func(ctx workflow.Context, to int) (int, error) {
					prev := limit
					limit = to
					return prev, nil
				}, &workflow.UpdateOpts[int]{Validator: func(to int) error {
					if to <= limit {
						return errors.Newf("raise to %d: not above %d", to, limit)
					}
					return nil
				}}); err != nil {
					return 0, err
				}
				if _, _, err := workflow.Receive[struct{}](ctx, "go", time.Hour); err != nil {
					return 0, err
				}
				return limit, nil
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: ns.Store, PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			sdk.Register(w, wf)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
			c, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			run, err := sdk.Start(ctx, c, wf, struct{}{}, nil)
			require.NoError(t, err)
			waiting := func() bool {
				events, err := c.History(ctx, run.ID)
				return err == nil && events[len(events)-1].Type() == history.WaitStarted
			}
			enginetest.WaitFor(t, "the task to wait for its signal", waiting)
			h := testServer(t, ns.Store)
			base := "/v1/tasks/" + run.ID.String() + "/updates/"
			before, err := c.History(ctx, run.ID)
			require.NoError(t, err)

			a := servertest.Send(t, h, "POST", base+"raise", []byte(`{"args":0}`))
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeUpdateRejected, a.Problem.Code)
			require.Contains(t, a.Problem.Detail, "not above 1")
			a = servertest.Send(t, h, "POST", base+"lower", []byte(`{"args":0}`))
			require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeUpdateNotFound, a.Problem.Code)
			after, err := c.History(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused update writes nothing")

			a = servertest.Send(t, h, "POST", base+"raise", []byte(`{"args":5,"update_id":"r-1"}`))
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			var res updateResponse
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.Equal(t, updateResponse{TaskID: run.ID, UpdateID: "r-1", Status: "completed", Output: json.RawMessage("1")}, res)
			a = servertest.Send(t, h, "POST", base+"raise", []byte(`{"args":9,"update_id":"r-1"}`))
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.True(t, res.Duplicate)
			require.JSONEq(t, "1", string(res.Output), "applied once")
			a = servertest.Send(t, h, "GET", base+"raise/r-1?timeout=1s", nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			a = servertest.Send(t, h, "GET", base+"raise/r-9?timeout=1s", nil)
			require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
			a = servertest.Send(t, h, "GET", base+"raise/r-1?timeout=2m", nil)
			require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)

			enginetest.WaitFor(t, "the task to wait again", waiting)
			_, err = c.Signal(ctx, run.ID, "go", nil, nil)
			require.NoError(t, err)
			got, err := run.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 5, got, "the update changed the workflow's result")
			a = servertest.Send(t, h, "POST", base+"raise", []byte(`{"args":7}`))
			require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeTaskState, a.Problem.Code)
		})
	}
}
