package server

// The console's callback links, as the server mounts the console beside
// the API that answers them: the page offers a link, and POSTing it to
// /v1/callbacks delivers the signal.

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cairnflow/cairn/workflow"
)

// startWaiting starts a doc task through the API and ends its first
// attempt waiting for the signal name for an hour, as a workflow's
// receive does.
func startWaiting(t *testing.T, h http.Handler, s store.Store, name string) uuid.UUID {
	t.Helper()
	id := startDoc(t, h, "")
	ct := servertest.ClaimDoc(t, s)
	require.Equal(t, id, ct.Task.ID)
	servertest.AppendFor(t, s, ct, history.WaitStartedData{Name: name, Position: 0, Deadline: time.Now().Add(time.Hour)})
	return id
}

// callbackTokens are an operator's and a reader's tokens.
var callbackTokens = []Token{
	{Name: "ops", SHA256: HashToken("ops-token"), Namespaces: []string{"*"}, Roles: []Role{RoleRead, RoleSubmit, RoleOperate}},
	{Name: "viewer", SHA256: HashToken("view-token"), Namespaces: []string{"*"}, Roles: []Role{RoleRead}},
}

// callbackInput reads the value of the callback link input id on page.
func callbackInput(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `" class="mono" readonly value="([^"]*)"`).FindStringSubmatch(page)
	require.NotNil(t, m, "no %s on the page:\n%s", id, page)
	return html.UnescapeString(m[1])
}

// The page of a task waiting for an approval shows an operator its
// signed callback links; POSTing the approve link, as a chat user would
// with no token, delivers the decision, once. A reader, or a server
// without a callback secret, gets no link.
func TestTaskPageShowsCallbackLinksThatDecide(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			b := approvalSetup(t, ns.Store)
			srv, err := New(Config{Store: ns.Store, Tokens: callbackTokens, CallbackSecret: testCallbackSecret})
			require.NoError(t, err)
			h := srv.Handler()
			noSecret := testServer(t, ns.Store, callbackTokens...)
			ops, viewer := []string{"Authorization", "Bearer ops-token"}, []string{"Authorization", "Bearer view-token"}
			id, pos := b.startWaiting(t)
			taskPage := "/console/tasks/" + id.String()

			a := servertest.Send(t, h, http.MethodGet, taskPage, nil, ops...)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			page := string(a.Body)
			require.Contains(t, page, `id="task-callback"`)
			approve := callbackInput(t, page, "callback-approve")
			reject := callbackInput(t, page, "callback-reject")
			plain := callbackInput(t, page, "callback-url")
			base, ok := strings.CutSuffix(approve, "?decision=approve")
			require.True(t, ok, approve)
			require.Equal(t, base+"?decision=reject", reject)
			require.Equal(t, base, plain)
			path, ok := strings.CutPrefix(base, "http://localhost/v1/callbacks/")
			require.True(t, ok, "the link is on the origin the page was loaded from: %s", base)
			cb, err := sdk.ParseCallbackToken(testCallbackSecret, path, time.Now())
			require.NoError(t, err)
			require.Equal(t, sdk.Callback{Namespace: "default", TaskID: id, Name: "approve", Wait: pos, Expires: cb.Expires}, cb)
			require.WithinDuration(t, time.Now().Add(time.Hour), cb.Expires, time.Minute, "valid until the wait's deadline")
			require.Contains(t, page, "curl -X POST -H 'Content-Type: application/json' '"+html.EscapeString(approve)+"'")
			a = servertest.Send(t, h, http.MethodGet, taskPage, nil, ops...)
			require.Equal(t, approve, callbackInput(t, string(a.Body), "callback-approve"), "the same link on every load")

			// A reader sees the wait but no link; neither does an operator
			// on a server with no secret.
			for name, c := range map[string]struct {
				h      http.Handler
				header []string
			}{"reader": {h, viewer}, "no secret": {noSecret, ops}} {
				a = servertest.Send(t, c.h, http.MethodGet, taskPage, nil, c.header...)
				require.Equal(t, http.StatusOK, a.Status, name)
				require.Contains(t, string(a.Body), "Waiting for signal", name)
				require.NotContains(t, string(a.Body), "task-callback", name)
				require.NotContains(t, string(a.Body), "/v1/callbacks/", name)
				require.NotContains(t, string(a.Body), path, name)
			}

			// The approve link, POSTed with no token and no body, decides.
			before := servertest.EventCount(t, ns.Store, id)
			a = servertest.Send(t, h, http.MethodPost, strings.TrimPrefix(approve, "http://localhost"), []byte{})
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			require.Equal(t, workflow.Decision{Approved: true, By: "callback"}, decisionOf(t, b.client, id))
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			var sigs []history.SignalReceivedData
			for _, e := range events[before:] {
				if sig, ok := e.Data.(history.SignalReceivedData); ok {
					sigs = append(sigs, sig)
				}
			}
			require.Len(t, sigs, 1)
			require.Equal(t, sdk.CallbackDedupID(path), sigs[0].DedupID)

			// Its twin is spent with it.
			after := servertest.EventCount(t, ns.Store, id)
			a = servertest.Send(t, h, http.MethodPost, strings.TrimPrefix(reject, "http://localhost"), []byte{})
			require.Equal(t, http.StatusGone, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeCallbackUsed, a.Problem.Code)
			require.Equal(t, after, servertest.EventCount(t, ns.Store, id))
			a = servertest.Send(t, h, http.MethodGet, taskPage, nil, ops...)
			require.NotContains(t, string(a.Body), "task-callback", "a finished task waits for nothing")
		})
	}
}

// A wait that is not an approval gets one link, whose JSON body is the
// signal's payload; the page's form and the link reach the same task.
func TestTaskPageCallbackLinkOfASignal(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, ns.Store, "default")
			srv, err := New(Config{Store: ns.Store, CallbackSecret: testCallbackSecret, SecureCookies: true})
			require.NoError(t, err)
			h := srv.Handler()
			id := startWaiting(t, h, ns.Store, "documents")
			a := servertest.Send(t, h, http.MethodGet, "/console/tasks/"+id.String(), nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			page := string(a.Body)
			require.NotContains(t, page, "callback-approve")
			link := callbackInput(t, page, "callback-url")
			path, ok := strings.CutPrefix(link, "https://localhost/v1/callbacks/")
			require.True(t, ok, "https behind a TLS proxy (SecureCookies): %s", link)
			a = servertest.Send(t, h, http.MethodPost, "/v1/callbacks/"+path, []byte(`{"files":3}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			sig, ok := events[len(events)-1].Data.(history.SignalReceivedData)
			require.True(t, ok, "%T", events[len(events)-1].Data)
			require.JSONEq(t, `{"files":3}`, string(sig.Payload))
			require.Equal(t, "callback", sig.Sender)
			claimed := servertest.ClaimDoc(t, ns.Store)
			require.Equal(t, id, claimed.Task.ID, "the signal woke the task")
		})
	}
}
