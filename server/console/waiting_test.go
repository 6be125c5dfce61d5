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

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
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
	for _, ns := range bothStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			registerDoc(t, ns.store, "default")
			h := testConsole(t, ns.store, tokens...)
			ops, viewer := []string{"Authorization", "Bearer ops-token"}, []string{"Authorization", "Bearer view-token"}
			start := func() uuid.UUID { return startDoc(t, ns.store) }

			// done waited, got its signal and finished; waiting waits.
			done := start()
			ct := claimDoc(t, ns.store)
			appendFor(t, ns.store, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(time.Hour)})
			_, err := ns.store.TaskSignal(context.Background(), &store.TaskSignalParams{Namespace: "default", TaskID: done, Name: "approval", Sender: "ops"})
			require.NoError(t, err)
			ct = claimDoc(t, ns.store)
			require.Equal(t, done, ct.Task.ID)
			appendFor(t, ns.store, ct, history.TaskCompletedData{})

			waiting := start()
			ct = claimDoc(t, ns.store)
			require.Equal(t, waiting, ct.Task.ID)
			appendFor(t, ns.store, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(time.Hour)})

			a := send(t, h, "GET", "/console/waiting", nil, viewer...)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
			page := string(a.body)
			require.Contains(t, page, "/console/tasks/"+waiting.String(), "the waiting task is listed")
			require.NotContains(t, page, done.String(), "the finished task is not")
			require.Contains(t, page, "approval")

			taskPage := "/console/tasks/" + waiting.String()
			a = send(t, h, "GET", taskPage, nil, ops...)
			require.Equal(t, http.StatusOK, a.status)
			require.Contains(t, string(a.body), `id="approve-task"`, "an operator gets the form")
			require.Contains(t, string(a.body), `id="reject-task"`)
			require.Contains(t, string(a.body), "Waiting for signal")
			a = send(t, h, "GET", taskPage, nil, viewer...)
			require.Equal(t, http.StatusOK, a.status)
			require.Contains(t, string(a.body), "Waiting for signal", "a reader sees the wait")
			require.NotContains(t, string(a.body), `id="approve-task"`, "but no form")
			a = send(t, h, "GET", "/console/tasks/"+done.String(), nil, ops...)
			require.NotContains(t, string(a.body), `id="approve-task"`, "a finished task waits for nothing")
			require.Contains(t, string(a.body), "signal approval received from ops", "the timeline names the sender")

			form := url.Values{"approved": {"true"}, "comment": {"looks good"}}
			w := consoleForm(t, h, taskPage+"/signals/approval", "view-token", form)
			require.Equal(t, http.StatusForbidden, w.Code, "a read-only token cannot signal")
			w = consoleForm(t, h, taskPage+"/signals/approval", "ops-token", form)
			require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
			landing := send(t, h, "GET", w.Header().Get("Location"), nil, ops...)
			require.Contains(t, string(landing.body), "Approved: signal approval sent.")

			events, err := ns.store.EventListByTask(context.Background(), waiting)
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
			ct = claimDoc(t, ns.store)
			require.Equal(t, waiting, ct.Task.ID, "the task is due again: it resumes")

			a = send(t, h, "GET", "/console/waiting", nil, viewer...)
			require.NotContains(t, string(a.body), waiting.String(), "no longer waiting")
		})
	}
}

// A wait that is not an approval gets a JSON payload box; its payload is
// sent as typed, and a payload that is not JSON is refused on the page.
func TestConsoleSignalFormSendsJSONPayload(t *testing.T) {
	t.Parallel()
	for _, ns := range bothStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			registerDoc(t, ns.store, "default")
			h := testConsole(t, ns.store)
			id := startWaiting(t, ns.store, "documents")
			taskPage := "/console/tasks/" + id.String()
			a := send(t, h, "GET", taskPage, nil)
			require.Equal(t, http.StatusOK, a.status)
			require.Contains(t, string(a.body), `id="send-signal"`)
			require.NotContains(t, string(a.body), `id="approve-task"`)
			require.Contains(t, string(a.body), "waiting for signal documents until", "the timeline shows the deadline")

			post := func(payload string) *httptest.ResponseRecorder {
				return consoleForm(t, h, taskPage+"/signals/documents", "", url.Values{"payload": {payload}})
			}
			w := post(`{not json`)
			require.Equal(t, http.StatusSeeOther, w.Code)
			landing := send(t, h, "GET", w.Header().Get("Location"), nil)
			require.Contains(t, string(landing.body), "not JSON")
			w = post(`{"files": 3}`)
			require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
			events, err := ns.store.EventListByTask(context.Background(), id)
			require.NoError(t, err)
			sig, ok := events[len(events)-1].Data.(history.SignalReceivedData)
			require.True(t, ok, "%T", events[len(events)-1].Data)
			require.JSONEq(t, `{"files":3}`, string(sig.Payload))
			require.Equal(t, "console:anonymous", sig.Sender)
		})
	}
}
