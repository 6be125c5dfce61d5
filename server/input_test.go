package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
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
	for _, st := range bothStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			registerDoc(t, st.store, "default")
			h := testServer(t, st.store)
			for _, c := range []struct {
				name, method, target, body string
				code, names                string // the problem's code, and what its detail names
			}{
				{"LoneSurrogateInInput", "POST", "/v1/tasks", `{"type":"doc","input":{"id":"\ud800"}}`, codeInvalidRequest, "field input.id"},
				{"InvalidUTF8InInput", "POST", "/v1/tasks", "{\"type\":\"doc\",\"input\":{\"id\":\"a\xffb\"}}", codeInvalidRequest, "field input.id"},
				{"TypeNUL", "GET", "/v1/tasks?type=%00", "", codeInvalidRequest, `query parameter "type"`},
				{"QueueNUL", "GET", "/v1/tasks?queue=%00", "", codeInvalidRequest, `query parameter "queue"`},
				{"TypeInvalidUTF8", "GET", "/v1/tasks?type=%ff", "", codeInvalidRequest, `query parameter "type"`},
				{"FieldNameCase", "POST", "/v1/tasks", `{"Type":"doc"}`, codeUnknownField, `unknown field "Type" (field names are case-sensitive: "type")`},
				{"FieldNameCaseBesideTheField", "POST", "/v1/tasks", `{"type":"doc","Type":"other"}`, codeUnknownField, `"Type"`},
				{"FieldTwice", "POST", "/v1/tasks", `{"type":"doc","input":1,"input":2}`, codeInvalidRequest, "field input is named twice"},
				{"MemberTwiceInInput", "POST", "/v1/tasks", `{"type":"doc","input":{"a":1,"a":2}}`, codeInvalidRequest, "field input.a is named twice"},
				{"KeyInvalidUTF8", "POST", "/v1/tasks", "{\"type\":\"doc\",\"idempotency_key\":\"a\xffb\"}", codeInvalidRequest, "field idempotency_key"},
				{"KeyLoneSurrogate", "POST", "/v1/tasks", `{"type":"doc","idempotency_key":"a\udfffb"}`, codeInvalidRequest, "field idempotency_key"},
				{"NumberOutOfRange", "POST", "/v1/tasks", `{"type":"doc","input":{"n":1e1000000}}`, codeInvalidRequest, "field input.n"},
				{"ReasonInvalidUTF8", "POST", "/v1/tasks/" + uuid.NewString() + "/cancel", "{\"reason\":\"\xff\"}", codeInvalidRequest, "field reason"},
			} {
				var body []byte
				if c.body != "" {
					body = []byte(c.body)
				}
				a := send(t, h, c.method, c.target, body)
				require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", c.name, a.body)
				require.Equal(t, c.code, a.problem.Code, "%s: %s", c.name, a.body)
				require.Contains(t, a.problem.Detail, c.names, c.name)
			}
			require.Zero(t, taskCount(t, st.store), "nothing was written")

			// What is right is still taken: a real U+FFFD, a surrogate pair.
			a := send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"id":"\ufffd\ud83d\ude00"},"idempotency_key":"a\ufffdb"}`))
			require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
			var started startResponse
			require.NoError(t, json.Unmarshal(a.body, &started))
			task, err := st.store.TaskGetByID(t.Context(), "default", started.ID)
			require.NoError(t, err)
			require.Equal(t, "a\uFFFDb", task.IdempotencyKey)
			var in struct{ ID string }
			require.NoError(t, json.Unmarshal(task.Input, &in))
			require.Equal(t, "\uFFFD\U0001F600", in.ID)
			a = send(t, h, "GET", "/v1/tasks?type=doc&queue=default", nil)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
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
	for _, st := range bothStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			registerDoc(t, st.store, "default")
			h := testServer(t, st.store, tokens...)
			post := func(token, body string) answer {
				return send(t, h, "POST", "/v1/tasks", []byte(body), "Authorization", "Bearer "+token)
			}
			first := post(submitToken, `{"type":"doc","input":{"invoice":42,"pages":[1,2]},"idempotency_key":"inv-42"}`)
			require.Equal(t, http.StatusAccepted, first.status, "%s", first.body)
			var created startResponse
			require.NoError(t, json.Unmarshal(first.body, &created))

			// The same start, its input written otherwise.
			same := `{"idempotency_key":"inv-42","input":{ "pages":[1.0, 2], "invoice":4.2e1 },"type":"doc"}`
			again := post(adminToken, same)
			require.Equal(t, http.StatusOK, again.status, "%s", again.body)
			require.JSONEq(t, `{"id":"`+created.ID.String()+`","status":"pending","existing":true}`, string(again.body))
			again = post(submitToken, same)
			require.Equal(t, http.StatusOK, again.status, "%s", again.body)
			require.JSONEq(t, `{"id":"`+created.ID.String()+`","existing":true}`, string(again.body), "a submit-only token learns no status")

			for _, body := range []string{
				`{"type":"doc","input":{"invoice":43,"pages":[1,2]},"idempotency_key":"inv-42"}`,
				`{"type":"doc","idempotency_key":"inv-42"}`,
			} {
				for _, token := range []string{submitToken, adminToken} {
					a := post(token, body)
					require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
					require.Equal(t, codeKeyReused, a.problem.Code, "%s", a.body)
					require.NotContains(t, string(a.body), created.ID.String())
					require.NotContains(t, string(a.body), "pending")
				}
			}
			require.Equal(t, 1, taskCount(t, st.store), "the refused starts wrote nothing")
			events, err := st.store.EventListByTask(t.Context(), created.ID)
			require.NoError(t, err)
			require.Len(t, events, 1, "nothing appended to the existing task")
			require.False(t, strings.Contains(string(again.body), "status"))
			require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, st.store))
		})
	}
}
