package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// A server with the namespace's keys shows an encrypted task's payloads
// in clear while the database holds them sealed, and an administrator's
// POST /v1/tasks/{id}/erase shreds them: the history keeps its events and
// ends with task_erased, the input then reads {"cairn_sealed": …}. A
// running task is refused with 409, and an operator may not erase.
func TestEraseOverHTTP(t *testing.T) {
	t.Parallel()
	const adminToken, operatorToken = "admin-secret", "operator-secret"
	tokens := []Token{
		{Name: "dpo", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "ops", SHA256: HashToken(operatorToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleOperate, RoleRead, RoleSubmit}},
	}
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	codec, err := seal.ParseKeys([]byte(`{"namespaces":{"default":{"current":"k1","keys":[{"id":"k1","key":"` + key + `"}]}}}`))
	require.NoError(t, err)
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServerKeys(t, st.Store, codec, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }

			started := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"passport":"P-123-SECRET"}}`), as(operatorToken)...)
			require.Equal(t, http.StatusAccepted, started.Status, "%s", started.Body)
			var task struct {
				ID    string          `json:"id"`
				Input json.RawMessage `json:"input"`
			}
			require.NoError(t, json.Unmarshal(started.Body, &task))
			got := servertest.Send(t, h, "GET", "/v1/tasks/"+task.ID, nil, as(operatorToken)...)
			require.Contains(t, string(got.Body), "P-123-SECRET", "the server opens the input")
			raw, err := store.TaskEvents(t.Context(), st.Store, "", uuid.MustParse(task.ID))
			require.NoError(t, err)
			encoded, err := json.Marshal(raw[0].Data)
			require.NoError(t, err)
			require.NotContains(t, string(encoded), "P-123-SECRET", "the store holds it sealed")

			pending := servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/erase", []byte(`{"reason":"too early"}`), as(adminToken)...)
			require.Equal(t, http.StatusConflict, pending.Status, "%s", pending.Body)
			require.Contains(t, pending.Problem.Detail, "only a finished task can be erased")

			cancelled := servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/cancel", []byte(`{}`), as(operatorToken)...)
			require.Equal(t, http.StatusAccepted, cancelled.Status, "%s", cancelled.Body)
			forbidden := servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/erase", []byte(`{}`), as(operatorToken)...)
			require.Equal(t, http.StatusForbidden, forbidden.Status)

			erased := servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/erase", []byte(`{"reason":"GDPR request 7"}`), as(adminToken)...)
			require.Equal(t, http.StatusAccepted, erased.Status, "%s", erased.Body)
			hist := servertest.Send(t, h, "GET", "/v1/tasks/"+task.ID+"/history", nil, as(operatorToken)...)
			require.Equal(t, http.StatusOK, hist.Status, "%s", hist.Body)
			require.NotContains(t, string(hist.Body), "P-123-SECRET")
			require.Contains(t, string(hist.Body), `"cairn_sealed"`)
			require.Contains(t, string(hist.Body), `"task_erased"`)
			require.Contains(t, string(hist.Body), fmt.Sprintf(`"reason":%q`, "GDPR request 7"))
		})
	}
}

// Probe finding: the blob of an erased task answered 500. Its bytes stay
// sealed under a key that is gone: GET /v1/blobs/{key} is 410
// payload_sealed, saying so.
func TestErasedTasksBlobIsGone(t *testing.T) {
	t.Parallel()
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	codec, err := seal.ParseKeys([]byte(`{"namespaces":{"default":{"current":"k1","keys":[{"id":"k1","key":"` + key + `"}]}}}`))
	require.NoError(t, err)
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServerKeys(t, st.Store, codec)
			big := `{"type":"doc","input":{"pages":"` + strings.Repeat("p", 100<<10) + `"}}`
			started := servertest.Send(t, h, "POST", "/v1/tasks", []byte(big))
			require.Equal(t, http.StatusAccepted, started.Status, "%s", started.Body)
			var task struct {
				ID string `json:"id"`
			}
			require.NoError(t, json.Unmarshal(started.Body, &task))
			c, err := sdk.NewClient(sdk.ClientConfig{Store: st.Store, Keys: codec})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			events, err := c.RawHistory(t.Context(), uuid.MustParse(task.ID))
			require.NoError(t, err)
			ref, ok := history.ParseBlobEnvelope(events[0].Data.(history.TaskScheduledData).Input)
			require.True(t, ok, "the input is kept as a blob")
			blob := servertest.Send(t, h, "GET", "/v1/blobs/"+ref.Key, nil)
			require.Equal(t, http.StatusOK, blob.Status, "%s", blob.Problem.Detail)

			require.Equal(t, http.StatusAccepted, servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/cancel", []byte(`{}`)).Status)
			require.Equal(t, http.StatusAccepted, servertest.Send(t, h, "POST", "/v1/tasks/"+task.ID+"/erase", []byte(`{}`)).Status)
			blob = servertest.Send(t, h, "GET", "/v1/blobs/"+ref.Key, nil)
			require.Equal(t, http.StatusGone, blob.Status, "%s", blob.Body)
			require.Equal(t, web.CodeSealed, blob.Problem.Code)
			require.Contains(t, blob.Problem.Detail, "erased")
		})
	}
}
