package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// consoleForm posts form to the console as a page of its own would, with
// token when it is not empty.
func consoleForm(t *testing.T, h http.Handler, target, token string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", target, strings.NewReader(form.Encode()))
	r.Host = "localhost"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestConsoleWaitingTasksAndTheirSignal(t *testing.T) {
	t.Parallel()
	tokens := []web.Token{
		{Name: "ops", SHA256: web.HashToken("ops-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleRead, web.RoleSubmit, web.RoleOperate}},
		{Name: "viewer", SHA256: web.HashToken("view-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleRead}},
	}
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testConsole(t, ns.Store, tokens...)
			ops, viewer := []string{"Authorization", "Bearer ops-token"}, []string{"Authorization", "Bearer view-token"}
			start := func() uuid.UUID { return startDoc(t, ns.Store) }

			// done waited, got its signal and finished; waiting waits.
			done := start()
			ct := servertest.ClaimDoc(t, ns.Store)
			servertest.AppendFor(t, ns.Store, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(time.Hour)})
			_, err := engine.SignalTask(context.Background(), ns.Store, &store.TaskSignalParams{Namespace: "default", TaskID: done, Name: "approval", Sender: "ops"})
			require.NoError(t, err)
			ct = servertest.ClaimDoc(t, ns.Store)
			require.Equal(t, done, ct.Task.ID)
			servertest.AppendFor(t, ns.Store, ct, history.TaskCompletedData{})

			waiting := start()
			ct = servertest.ClaimDoc(t, ns.Store)
			require.Equal(t, waiting, ct.Task.ID)
			servertest.AppendFor(t, ns.Store, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(time.Hour)})

			a := servertest.Send(t, h, "GET", "/console/waiting", nil, viewer...)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			page := string(a.Body)
			require.Contains(t, page, "/console/tasks/"+waiting.String(), "the waiting task is listed")
			require.NotContains(t, page, done.String(), "the finished task is not")
			require.Contains(t, page, "approval")

			taskPage := "/console/tasks/" + waiting.String()
			a = servertest.Send(t, h, "GET", taskPage, nil, ops...)
			require.Equal(t, http.StatusOK, a.Status)
			require.Contains(t, string(a.Body), `id="approve-task"`, "an operator gets the form")
			require.Contains(t, string(a.Body), `id="reject-task"`)
			require.Contains(t, string(a.Body), "Waiting for signal")
			a = servertest.Send(t, h, "GET", taskPage, nil, viewer...)
			require.Equal(t, http.StatusOK, a.Status)
			require.Contains(t, string(a.Body), "Waiting for signal", "a reader sees the wait")
			require.NotContains(t, string(a.Body), `id="approve-task"`, "but no form")
			a = servertest.Send(t, h, "GET", "/console/tasks/"+done.String(), nil, ops...)
			require.NotContains(t, string(a.Body), `id="approve-task"`, "a finished task waits for nothing")
			require.Contains(t, string(a.Body), "signal approval received from ops", "the timeline names the sender")

			form := url.Values{"approved": {"true"}, "comment": {"looks good"}}
			w := consoleForm(t, h, taskPage+"/signals/approval", "view-token", form)
			require.Equal(t, http.StatusForbidden, w.Code, "a read-only token cannot signal")
			w = consoleForm(t, h, taskPage+"/signals/approval", "ops-token", form)
			require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
			landing := servertest.Send(t, h, "GET", w.Header().Get("Location"), nil, ops...)
			require.Contains(t, string(landing.Body), "Approved: signal approval sent.")

			events, err := store.TaskEvents(context.Background(), ns.Store, "", waiting)
			require.NoError(t, err)
			var sigs []history.SignalReceivedData
			for _, e := range events {
				if sig, ok := e.Data.(history.SignalReceivedData); ok {
					sigs = append(sigs, sig)
				}
			}
			require.Len(t, sigs, 1)
			require.JSONEq(t, `{"approved":true,"comment":"looks good"}`, string(sigs[0].Payload))
			require.Equal(t, "console:ops", sigs[0].Sender)
			state, err := history.Replay(events)
			require.NoError(t, err)
			require.Nil(t, state.Wait, "the signal ended the wait")
			ct = servertest.ClaimDoc(t, ns.Store)
			require.Equal(t, waiting, ct.Task.ID, "the task is due again: it resumes")

			a = servertest.Send(t, h, "GET", "/console/waiting", nil, viewer...)
			require.NotContains(t, string(a.Body), waiting.String(), "no longer waiting")
		})
	}
}

// A wait that is not an approval gets a JSON payload box; its payload is
// sent as typed, and a payload that is not JSON is refused on the page.
func TestConsoleSignalFormSendsJSONPayload(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testConsole(t, ns.Store)
			id := startWaiting(t, ns.Store, "documents")
			taskPage := "/console/tasks/" + id.String()
			a := servertest.Send(t, h, "GET", taskPage, nil)
			require.Equal(t, http.StatusOK, a.Status)
			require.Contains(t, string(a.Body), `id="send-signal"`)
			require.NotContains(t, string(a.Body), `id="approve-task"`)
			require.Contains(t, string(a.Body), "waiting for signal documents until", "the timeline shows the deadline")

			post := func(payload string) *httptest.ResponseRecorder {
				return consoleForm(t, h, taskPage+"/signals/documents", "", url.Values{"payload": {payload}})
			}
			w := post(`{not json`)
			require.Equal(t, http.StatusSeeOther, w.Code)
			landing := servertest.Send(t, h, "GET", w.Header().Get("Location"), nil)
			require.Contains(t, string(landing.Body), "not JSON")
			w = post(`{"files": 3}`)
			require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			sig, ok := events[len(events)-1].Data.(history.SignalReceivedData)
			require.True(t, ok, "%T", events[len(events)-1].Data)
			require.JSONEq(t, `{"files":3}`, string(sig.Payload))
			require.Equal(t, "console:anonymous", sig.Sender)
		})
	}
}
