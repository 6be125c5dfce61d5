package console

import (
	"context"
	"html"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// The stranded page lists what deploy checks found, by type with the
// first divergence, and the queue page shows them beside the versions no
// worker runs.
func TestConsoleStrandedTasks(t *testing.T) {
	t.Parallel()
	tokens := []web.Token{{Name: "viewer", SHA256: web.HashToken("view-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleRead}}}
	viewer := []string{"Authorization", "Bearer view-token"}
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testConsole(t, ns.Store, tokens...)
			a := servertest.Send(t, h, "GET", "/console/stranded", nil, viewer...)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			require.Contains(t, string(a.Body), "No stranded task")

			id := startDoc(t, ns.Store)
			ct := servertest.ClaimDoc(t, ns.Store)
			servertest.AppendFor(t, ns.Store, ct, history.WaitStartedData{Name: "approve", Position: 0, Deadline: time.Now().Add(time.Hour)})
			require.NoError(t, ns.Store.StrandedReplace(context.Background(), &store.StrandedReplaceParams{Namespace: "default",
				Type: ct.Task.Type, Version: ct.Task.TypeVersion, WorkerID: "worker-v2",
				Tasks: []store.StrandedTask{{TaskID: id, Kind: "receive", Position: 0, Recorded: "approve", Called: `(step 1 "classify")`, Error: "receive 0: …"}}}))

			a = servertest.Send(t, h, "GET", "/console/stranded", nil, viewer...)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			page := html.UnescapeString(string(a.Body))
			require.Contains(t, page, "/console/tasks/"+id.String())
			require.Contains(t, page, `First divergence: receive 0 — the history recorded <code>approve</code>, the code called <code>(step 1 "classify")</code>`)
			require.Contains(t, page, "worker-v2")

			a = servertest.Send(t, h, "GET", "/console/queues/"+ct.Task.Queue, nil, viewer...)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			page = html.UnescapeString(string(a.Body))
			require.Contains(t, page, `id="queue-stranded"`)
			require.Contains(t, page, "the code of worker-v2 cannot replay them: receive 0 recorded <code>approve</code>")
		})
	}
}
