package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// A task whose workflow waits for an approval is pending, and says what
// it waits for and until when: in Client.Get and List, in the API's task
// JSON (GET /v1/tasks/{id} and the listing) and on the console's task
// list and task page. Once decided, it waits for nothing. Before, all of
// them said "pending" only.
func TestAWaitingTaskSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetup(t, ns.Store)
			id, _ := b.startWaiting(t)
			ctx := context.Background()

			info, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, history.StatusPending, info.Status)
			require.NotNil(t, info.Waiting)
			require.NotNil(t, info.Waiting.Deadline)
			require.WithinDuration(t, time.Now().Add(time.Hour), *info.Waiting.Deadline, time.Minute, "the wait's deadline: an hour")
			require.Equal(t, sdk.Waiting{Kind: sdk.WaitingSignal, Name: "approve", Deadline: info.Waiting.Deadline}, *info.Waiting)
			listed, err := b.client.List(ctx, nil)
			require.NoError(t, err)
			require.Len(t, listed, 1)
			require.Equal(t, info.Waiting, listed[0].Waiting)

			deadline := info.Waiting.Deadline.Format(time.RFC3339Nano)
			want := `{"kind":"signal","name":"approve","deadline":"` + deadline + `"}`
			a := servertest.Send(t, b.h, http.MethodGet, "/v1/tasks/"+id.String(), nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			var got struct {
				Status  string          `json:"status"`
				Waiting json.RawMessage `json:"waiting"`
			}
			require.NoError(t, json.Unmarshal(a.Body, &got))
			require.Equal(t, "pending", got.Status)
			require.JSONEq(t, want, string(got.Waiting))
			a = servertest.Send(t, b.h, http.MethodGet, "/v1/tasks", nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			var list struct {
				Tasks []struct {
					Waiting json.RawMessage `json:"waiting"`
				} `json:"tasks"`
			}
			require.NoError(t, json.Unmarshal(a.Body, &list))
			require.Len(t, list.Tasks, 1)
			require.JSONEq(t, want, string(list.Tasks[0].Waiting))

			title := `title="waiting for signal approve until ` + info.Waiting.Deadline.UTC().Format("2006-01-02 15:04:05.000Z") + `"`
			page := servertest.SendHTML(t, b.h, "/console/tasks/"+id.String(), http.StatusOK)
			require.Contains(t, page, `id="task-status">pending</span> <span class="muted waiting" id="task-waiting" `+title+`>waiting · approval approve</span>`)
			page = servertest.SendHTML(t, b.h, "/console/tasks", http.StatusOK)
			require.Contains(t, page, `>pending</span> <span class="muted waiting" `+title+`>waiting · approval approve</span>`)

			_, err = b.client.Signal(ctx, id, "approve", map[string]any{"approved": true}, &sdk.SignalOpts{})
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			done, err := b.client.Wait(waitCtx, id)
			require.NoError(t, err)
			require.Equal(t, history.StatusCompleted, done.Status)
			info, err = b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Nil(t, info.Waiting, "a finished task waits for nothing")
			page = servertest.SendHTML(t, b.h, "/console/tasks/"+id.String(), http.StatusOK)
			require.NotContains(t, page, "task-waiting")
		})
	}
}
