package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
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

// TestQueryEndpoints: a waiting task's query answered over HTTP by a
// worker's replay, its arguments in the URL or the body; the problems of
// an unknown query, a failing handler and a type no worker registered.
func TestQueryEndpoints(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			ctx := context.Background()
			wf := sdk.NewWorkflow("query.http", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
				stage := "waiting"
				if err := workflow.SetQuery(ctx, "stage", func(suffix string) (string, error) { return stage + suffix, nil }); err != nil {
					return "", err
				}
				if err := workflow.SetQuery(ctx, "fail", func(struct{}) (int, error) { return 0, errors.New("not now") }); err != nil {
					return "", err
				}
				if _, _, err := workflow.Receive[struct{}](ctx, "go", time.Hour); err != nil {
					return "", err
				}
				stage = "done"
				return stage, nil
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
			enginetest.WaitFor(t, "the task to wait for its signal", func() bool {
				events, err := c.History(ctx, run.ID)
				return err == nil && events[len(events)-1].Type() == history.WaitStarted
			})
			h := testServer(t, ns.Store)
			base := "/v1/tasks/" + run.ID.String() + "/queries/"

			a := servertest.Send(t, h, "GET", base+"stage?args="+url.QueryEscape(`" (asked)"`), nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			var res queryResponse
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.JSONEq(t, `"waiting (asked)"`, string(res.Answer))
			a = servertest.Send(t, h, "POST", base+"stage", []byte(`{"args":" (posted)"}`))
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.JSONEq(t, `"waiting (posted)"`, string(res.Answer))
			a = servertest.Send(t, h, "GET", base+"stage", nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			require.JSONEq(t, `{"answer":"waiting"}`, string(a.Body))

			a = servertest.Send(t, h, "GET", base+"progress", nil)
			require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeQueryNotFound, a.Problem.Code)
			require.Equal(t, "progress", a.Problem.Query)
			require.Equal(t, []string{"fail", "stage"}, a.Problem.Registered)
			a = servertest.Send(t, h, "GET", base+"fail", nil)
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeQueryFailed, a.Problem.Code)
			require.Contains(t, a.Problem.Detail, "not now")
			a = servertest.Send(t, h, "GET", base+"stage?args=%7B", nil)
			require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)
			a = servertest.Send(t, h, "GET", base+"stage?args=42", nil)
			require.Equal(t, http.StatusBadRequest, a.Status, "arguments of the wrong type: %s", a.Body)
			a = servertest.Send(t, h, "POST", base+"stage", []byte(`{"args":"`+strings.Repeat("a", sdk.MaxQueryArgsBytes)+`"}`))
			require.Equal(t, http.StatusRequestEntityTooLarge, a.Status, "%s", a.Body)

			nobody := sdk.NewWorkflow("query.nobody", 2, func(workflow.Context, struct{}) (int, error) { return 0, nil }, nil)
			other, err := sdk.Start(ctx, c, nobody, struct{}{}, nil)
			require.NoError(t, err)
			a = servertest.Send(t, h, "GET", "/v1/tasks/"+other.ID.String()+"/queries/stage", nil)
			require.Equal(t, http.StatusServiceUnavailable, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeNoWorker, a.Problem.Code)
			require.Equal(t, sdk.NoWorkerRegistered, a.Problem.Reason)
			require.Contains(t, a.Problem.Detail, "type query.nobody version 2")
		})
	}
}
