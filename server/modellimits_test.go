package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/server/internal/servertest"
)

// /v1/model-limits sets, lists and deletes a namespace's model rate
// limits, alike on both stores; bad limits are refused with what was
// wrong; only an admin changes them; a model's slash is URL-encoded.
func TestModelLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	const adminToken, readerToken = "admin-secret", "reader-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "reader", SHA256: HashToken(readerToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleRead}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			h := testServer(t, st.Store, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
			put := servertest.Send(t, h, "PUT", "/v1/model-limits/openai%2Fgpt-4o", []byte(`{"tokens_per_minute":20000,"requests_per_minute":500}`),
				as(adminToken)...)
			require.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
			var got modelLimitView
			require.NoError(t, json.Unmarshal(put.Body, &got))
			require.Equal(t, "openai/gpt-4o", got.Model)
			require.Equal(t, int64(20000), got.TokensPerMinute)

			for body, says := range map[string]string{
				`{}`:                          "set TokensPerMinute, RequestsPerMinute or both",
				`{"tokens_per_minute":-1}`:    "TokensPerMinute -1 is outside",
				`{"requests_per_minute":"x"}`: "requests_per_minute",
			} {
				bad := servertest.Send(t, h, "PUT", "/v1/model-limits/m", []byte(body), as(adminToken)...)
				require.Equal(t, http.StatusBadRequest, bad.Status, "%s: %s", body, bad.Body)
				require.Contains(t, bad.Problem.Detail, says, body)
			}
			refused := servertest.Send(t, h, "PUT", "/v1/model-limits/m", []byte(`{"tokens_per_minute":1}`), as(readerToken)...)
			require.Equal(t, http.StatusForbidden, refused.Status)

			list := servertest.Send(t, h, "GET", "/v1/model-limits", nil, as(readerToken)...)
			require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
			var listed struct {
				ModelLimits []modelLimitView `json:"model_limits"`
			}
			require.NoError(t, json.Unmarshal(list.Body, &listed))
			require.Len(t, listed.ModelLimits, 1, "refused limits wrote nothing")

			del := servertest.Send(t, h, "DELETE", "/v1/model-limits/openai%2Fgpt-4o", []byte(`{}`), as(adminToken)...)
			require.Equal(t, http.StatusNoContent, del.Status, "%s", del.Body)
			del = servertest.Send(t, h, "DELETE", "/v1/model-limits/openai%2Fgpt-4o", []byte(`{}`), as(adminToken)...)
			require.Equal(t, http.StatusNotFound, del.Status, "%s", del.Body)
		})
	}
}
