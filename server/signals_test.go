package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// startDoc starts a "doc" task through the API and returns its id.
func startDoc(t *testing.T, h http.Handler, key string) uuid.UUID {
	t.Helper()
	body := `{"type":"doc","input":{}}`
	if key != "" {
		body = `{"type":"doc","input":{},"idempotency_key":"` + key + `"}`
	}
	a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(body))
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var res startResponse
	require.NoError(t, json.Unmarshal(a.Body, &res))
	return res.ID
}

func TestSignalEndpoints(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testServer(t, ns.Store)
			id := startDoc(t, h, "order-1")
			target := "/v1/tasks/" + id.String() + "/signals/approval"

			a := servertest.Send(t, h, "POST", target, []byte(`{"payload":{"ok":true},"dedup_id":"click-1"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			var res signalResponse
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.Equal(t, signalResponse{TaskID: id}, res)

			a = servertest.Send(t, h, "POST", target, []byte(`{"payload":{"ok":true},"dedup_id":"click-1"}`))
			require.Equal(t, http.StatusOK, a.Status, "a duplicate writes nothing: %s", a.Body)
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.True(t, res.Duplicate)

			a = servertest.Send(t, h, "POST", "/v1/tasks/by-key/order-1/signals/approval", []byte(`{}`))
			require.Equal(t, http.StatusAccepted, a.Status, "a signal without payload: %s", a.Body)
			require.NoError(t, json.Unmarshal(a.Body, &res))
			require.Equal(t, id, res.TaskID)

			sigs := servertest.SignalsOf(t, ns.Store, id)
			require.Len(t, sigs, 2)
			require.JSONEq(t, `{"ok":true}`, string(sigs[0].Payload))
			require.Equal(t, "click-1", sigs[0].DedupID)
			require.Empty(t, sigs[1].Payload)
			require.NotEmpty(t, sigs[1].Sender, "the requester is recorded as the sender")

			for _, c := range []struct {
				target string
				body   string
				status int
				code   string
			}{
				{"/v1/tasks/" + uuid.NewString() + "/signals/approval", "", http.StatusNotFound, web.CodeNotFound},
				{"/v1/tasks/by-key/order-2/signals/approval", "", http.StatusNotFound, web.CodeNotFound},
				{"/v1/tasks/not-a-uuid/signals/approval", "", http.StatusBadRequest, web.CodeInvalidRequest},
				{target, `{"payload":{"a":1,"a":2}}`, http.StatusBadRequest, web.CodeInvalidRequest},
				{target, `{"sender":"me"}`, http.StatusBadRequest, web.CodeUnknownField},
			} {
				body := c.body
				if body == "" {
					body = "{}"
				}
				a := servertest.Send(t, h, "POST", c.target, []byte(body))
				require.Equal(t, c.status, a.Status, "%s %s: %s", c.target, c.body, a.Body)
				require.Equal(t, c.code, a.Problem.Code, "%s %s: %s", c.target, c.body, a.Body)
			}

			// A finished task: 409, nothing written.
			done := startDoc(t, h, "")
			a = servertest.Send(t, h, "POST", "/v1/tasks/"+done.String()+"/cancel", []byte(`{}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			before := servertest.EventCount(t, ns.Store, done)
			a = servertest.Send(t, h, "POST", "/v1/tasks/"+done.String()+"/signals/approval", []byte(`{}`))
			require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeTaskState, a.Problem.Code)
			require.Equal(t, before, servertest.EventCount(t, ns.Store, done), "a refused signal writes nothing")
			enginetest.RequireProjectionsMatch(t, ns.Store)
		})
	}
}

func TestSignalNeedsTheOperateRole(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	servertest.RegisterDoc(t, s, "default")
	tokens := []Token{
		{Name: "submitter", SHA256: HashToken("submit"), Namespaces: []string{"default"}, Roles: []Role{RoleSubmit}},
		{Name: "operator", SHA256: HashToken("operate"), Namespaces: []string{"default"}, Roles: []Role{RoleOperate}},
	}
	h := testServer(t, s, tokens...)
	a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{}}`), "Authorization", "Bearer submit")
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var started startResponse
	require.NoError(t, json.Unmarshal(a.Body, &started))
	target := "/v1/tasks/" + started.ID.String() + "/signals/approval"
	a = servertest.Send(t, h, "POST", target, []byte(`{}`), "Authorization", "Bearer submit")
	require.Equal(t, http.StatusForbidden, a.Status, "%s", a.Body)
	a = servertest.Send(t, h, "POST", target, []byte(`{}`), "Authorization", "Bearer operate")
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	events, err := store.TaskEvents(context.Background(), s, "", started.ID)
	require.NoError(t, err)
	require.Contains(t, events[len(events)-1].Data.(history.SignalReceivedData).Sender, "operator", "the token is recorded as the sender")
}

// Probe finding: signal names and dedup ids were unbounded (an
// 8,000-character name was stored). The API, as the SDK and the CLI
// (both through Client.Signal), takes names and dedup ids of at most
// 200 bytes of text: past that, or with a control character, 400 and
// nothing written, on both stores.
func TestSignalNamesAndDedupIDsAreBounded(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testServer(t, ns.Store)
			id := startDoc(t, h, "order-9")
			before := servertest.EventCount(t, ns.Store, id)
			long := strings.Repeat("n", 8000)
			for what, c := range map[string]struct{ path, body string }{
				"8,000-character name":     {"/v1/tasks/" + id.String() + "/signals/" + long, `{}`},
				"201-byte name":            {"/v1/tasks/" + id.String() + "/signals/" + strings.Repeat("n", 201), `{}`},
				"name by key":              {"/v1/tasks/by-key/order-9/signals/" + long, `{}`},
				"control character":        {"/v1/tasks/" + id.String() + "/signals/a%0Ab", `{}`},
				"8,000-character dedup id": {"/v1/tasks/" + id.String() + "/signals/approval", `{"dedup_id":"` + long + `"}`},
			} {
				a := servertest.Send(t, h, "POST", c.path, []byte(c.body))
				require.Equal(t, http.StatusBadRequest, a.Status, "%s: %s", what, a.Body)
				require.Equal(t, web.CodeInvalidRequest, a.Problem.Code, what)
			}
			require.Equal(t, before, servertest.EventCount(t, ns.Store, id), "nothing written")
			a := servertest.Send(t, h, "POST", "/v1/tasks/"+id.String()+"/signals/"+strings.Repeat("n", 200),
				[]byte(`{"dedup_id":"`+strings.Repeat("d", 200)+`"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "at the bounds: %s", a.Body)
		})
	}
}
