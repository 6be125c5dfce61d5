package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestStrictInputIsRefusedAlikeOnBothStores reproduces findings 7 and 8:
// each request once answered 500 on PostgreSQL (22P02, 22021) and 202 or
// 200 on the embedded store, or was read leniently on both ({"Type": …},
// a member twice, an idempotency key turned into a\uFFFDb). Each is now a
// 400 naming the field, on both, and nothing is written.
func TestStrictInputIsRefusedAlikeOnBothStores(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServer(t, st.Store)
			for _, c := range []struct {
				name, method, target, body string
				code, names                string // the problem's code, and what its detail names
			}{
				{"LoneSurrogateInInput", "POST", "/v1/tasks", `{"type":"doc","input":{"id":"\ud800"}}`, web.CodeInvalidRequest, "field input.id"},
				{"InvalidUTF8InInput", "POST", "/v1/tasks", "{\"type\":\"doc\",\"input\":{\"id\":\"a\xffb\"}}", web.CodeInvalidRequest, "field input.id"},
				{"TypeNUL", "GET", "/v1/tasks?type=%00", "", web.CodeInvalidRequest, `query parameter "type"`},
				{"QueueNUL", "GET", "/v1/tasks?queue=%00", "", web.CodeInvalidRequest, `query parameter "queue"`},
				{"TypeInvalidUTF8", "GET", "/v1/tasks?type=%ff", "", web.CodeInvalidRequest, `query parameter "type"`},
				{"FieldNameCase", "POST", "/v1/tasks", `{"Type":"doc"}`, web.CodeUnknownField, `unknown field "Type" (field names are case-sensitive: "type")`},
				{"FieldNameCaseBesideTheField", "POST", "/v1/tasks", `{"type":"doc","Type":"other"}`, web.CodeUnknownField, `"Type"`},
				{"FieldTwice", "POST", "/v1/tasks", `{"type":"doc","input":1,"input":2}`, web.CodeInvalidRequest, "field input is named twice"},
				{"MemberTwiceInInput", "POST", "/v1/tasks", `{"type":"doc","input":{"a":1,"a":2}}`, web.CodeInvalidRequest, "field input.a is named twice"},
				{"KeyInvalidUTF8", "POST", "/v1/tasks", "{\"type\":\"doc\",\"idempotency_key\":\"a\xffb\"}", web.CodeInvalidRequest, "field idempotency_key"},
				{"KeyLoneSurrogate", "POST", "/v1/tasks", `{"type":"doc","idempotency_key":"a\udfffb"}`, web.CodeInvalidRequest, "field idempotency_key"},
				{"NumberOutOfRange", "POST", "/v1/tasks", `{"type":"doc","input":{"n":1e1000000}}`, web.CodeInvalidRequest, "field input.n"},
				{"ReasonInvalidUTF8", "POST", "/v1/tasks/" + uuid.NewString() + "/cancel", "{\"reason\":\"\xff\"}", web.CodeInvalidRequest, "field reason"},
			} {
				var body []byte
				if c.body != "" {
					body = []byte(c.body)
				}
				a := servertest.Send(t, h, c.method, c.target, body)
				require.Equal(t, http.StatusBadRequest, a.Status, "%s: %s", c.name, a.Body)
				require.Equal(t, c.code, a.Problem.Code, "%s: %s", c.name, a.Body)
				require.Contains(t, a.Problem.Detail, c.names, c.name)
			}
			require.Zero(t, taskCount(t, st.Store), "nothing was written")

			// What is right is still taken: a real U+FFFD, a surrogate pair.
			a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"id":"\ufffd\ud83d\ude00"},"idempotency_key":"a\ufffdb"}`))
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			var started startResponse
			require.NoError(t, json.Unmarshal(a.Body, &started))
			task, err := st.Store.TaskGet(t.Context(), &store.TaskGetParams{Namespace: "default", ID: started.ID})
			require.NoError(t, err)
			require.Equal(t, "a\uFFFDb", task.IdempotencyKey)
			var in struct{ ID string }
			require.NoError(t, json.Unmarshal(task.Input, &in))
			require.Equal(t, "\uFFFD\U0001F600", in.ID)
			a = servertest.Send(t, h, "GET", "/v1/tasks?type=doc&queue=default", nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		})
	}
}

// TestIdempotencyKeyReuseIsAConflictOnBothStores reproduces finding 9's
// reuse: a start with a taken key and another input once answered 200
// with the existing task's id and status, also to a submit-only token. Now
// it is a 409 idempotency_key_reused naming neither, on both stores, and
// nothing is written; the same start repeated is a 200 with the id, and
// the status only for a token that may read.
func TestIdempotencyKeyReuseIsAConflictOnBothStores(t *testing.T) {
	t.Parallel()
	const adminToken, submitToken = "admin-secret", "submit-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "submitter", SHA256: HashToken(submitToken), Namespaces: []string{"default"}, Roles: []Role{RoleSubmit}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServer(t, st.Store, tokens...)
			post := func(token, body string) servertest.Answer {
				return servertest.Send(t, h, "POST", "/v1/tasks", []byte(body), "Authorization", "Bearer "+token)
			}
			first := post(submitToken, `{"type":"doc","input":{"invoice":42,"pages":[1,2]},"idempotency_key":"inv-42"}`)
			require.Equal(t, http.StatusAccepted, first.Status, "%s", first.Body)
			var created startResponse
			require.NoError(t, json.Unmarshal(first.Body, &created))

			// The same start, its input written otherwise.
			same := `{"idempotency_key":"inv-42","input":{ "pages":[1.0, 2], "invoice":4.2e1 },"type":"doc"}`
			again := post(adminToken, same)
			require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
			require.JSONEq(t, `{"id":"`+created.ID.String()+`","status":"pending","existing":true}`, string(again.Body))
			again = post(submitToken, same)
			require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
			require.JSONEq(t, `{"id":"`+created.ID.String()+`","existing":true}`, string(again.Body), "a submit-only token learns no status")

			for _, body := range []string{
				`{"type":"doc","input":{"invoice":43,"pages":[1,2]},"idempotency_key":"inv-42"}`,
				`{"type":"doc","idempotency_key":"inv-42"}`,
			} {
				for _, token := range []string{submitToken, adminToken} {
					a := post(token, body)
					require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
					require.Equal(t, web.CodeKeyReused, a.Problem.Code, "%s", a.Body)
					require.NotContains(t, string(a.Body), created.ID.String())
					require.NotContains(t, string(a.Body), "pending")
				}
			}
			require.Equal(t, 1, taskCount(t, st.Store), "the refused starts wrote nothing")
			events, err := store.TaskEvents(t.Context(), st.Store, "", created.ID)
			require.NoError(t, err)
			require.Len(t, events, 1, "nothing appended to the existing task")
			require.False(t, strings.Contains(string(again.Body), "status"))
			require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, st.Store))
		})
	}
}

// TestStartWithARetiredKeyAnswersTheRemovedTask: once retention removed
// a task, a start with its key (still retired) is a duplicate of it: 200
// with the removed task's id and existing, no status, on both stores; not
// the 404 reading the removed task would answer.
func TestStartWithARetiredKeyAnswersTheRemovedTask(t *testing.T) {
	t.Parallel()
	const adminToken = "admin-secret"
	admin := Token{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServer(t, st.Store, admin)
			body := `{"type":"doc","input":{"invoice":7},"idempotency_key":"inv-7"}`
			first := servertest.Send(t, h, "POST", "/v1/tasks", []byte(body), "Authorization", "Bearer "+adminToken)
			require.Equal(t, http.StatusAccepted, first.Status, "%s", first.Body)
			var created startResponse
			require.NoError(t, json.Unmarshal(first.Body, &created))
			claimedRes, err := st.Store.TaskClaim(t.Context(), &store.TaskClaimParams{Namespace: "default", Queues: []string{"default"},
				Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
			claimed := claimedRes.Tasks
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			c := claimed[0]
			_, err = st.Store.EventAppend(t.Context(), &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
				Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: []byte(`1`)}}})
			require.NoError(t, err)
			removed, err := enginetest.RemoveFinished(t.Context(), st.Store, &store.RemoveFinishedParams{Namespace: "default",
				Before: time.Now().Add(time.Hour), Max: 10, KeysUntil: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.Equal(t, 1, removed.Tasks)

			again := servertest.Send(t, h, "POST", "/v1/tasks", []byte(body), "Authorization", "Bearer "+adminToken)
			require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
			require.JSONEq(t, `{"id":"`+created.ID.String()+`","existing":true}`, string(again.Body))
			gone := servertest.Send(t, h, "GET", "/v1/tasks/"+created.ID.String(), nil, "Authorization", "Bearer "+adminToken)
			require.Equal(t, http.StatusNotFound, gone.Status, "the task itself is gone")
		})
	}
}
