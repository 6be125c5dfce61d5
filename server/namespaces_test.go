package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// GET and PUT /v1/namespace read and replace the request's namespace's
// retention settings, alike on both stores; bad settings are refused with
// what was wrong, and write nothing; only an admin changes them, and the
// archive is not changed over HTTP at all.
func TestNamespaceSettingsOverHTTP(t *testing.T) {
	t.Parallel()
	const adminToken, readerToken = "admin-secret", "reader-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "reader", SHA256: HashToken(readerToken), Namespaces: []string{"tenant-b"}, Roles: []Role{RoleRead}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			h := testServer(t, st.Store, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }

			// The archive is set by whoever runs the server; PUT keeps it.
			require.NoError(t, st.Store.NamespaceSet(t.Context(), &store.NamespaceSetParams{Namespace: "tenant-b", Archive: "s3://bucket/cairn?endpoint=127.0.0.1:9000"}))
			got := servertest.Send(t, h, "GET", "/v1/namespace?namespace=tenant-b", nil, as(adminToken)...)
			require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
			require.JSONEq(t, `{"namespace":"tenant-b","retention_seconds":null,"key_retention_seconds":null,"archive":"s3://bucket/cairn?endpoint=127.0.0.1:9000"}`, string(got.Body))

			put := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b",
				[]byte(`{"retention_seconds":2592000,"key_retention_seconds":0.5}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
			want := `{"namespace":"tenant-b","retention_seconds":2592000,"key_retention_seconds":0.5,"archive":"s3://bucket/cairn?endpoint=127.0.0.1:9000"}`
			require.JSONEq(t, want, string(put.Body))
			got = servertest.Send(t, h, "GET", "/v1/namespace", nil, append(as(readerToken), "Cairn-Namespace", "tenant-b")...)
			require.JSONEq(t, want, string(got.Body))

			for body, says := range map[string]string{
				`{"retention_seconds":-1}`:         "retention_seconds -1 is not a number of seconds between 0.001 and",
				`{"key_retention_seconds":0.0001}`: "key_retention_seconds 0.0001 is not a number of seconds",
				`{"retention_seconds":1e300}`:      "retention_seconds 1e+300 is not a number of seconds",
				`{"retention":"30d"}`:              "retention",
				`{"retention_seconds":"2592000"}`:  "retention_seconds",
				``:                                 "",
			} {
				bad := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(body), as(adminToken)...)
				require.Equal(t, http.StatusBadRequest, bad.Status, "%s: %s", body, bad.Body)
				require.Contains(t, bad.Problem.Detail, says, body)
			}
			refused := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(`{}`), as(readerToken)...)
			require.Equal(t, http.StatusForbidden, refused.Status)
			got = servertest.Send(t, h, "GET", "/v1/namespace?namespace=tenant-b", nil, as(adminToken)...)
			require.JSONEq(t, want, string(got.Body), "refused settings wrote nothing")

			typed := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b",
				[]byte(`{"retention_seconds":2592000,"type_retention_seconds":{"report.render":3600,"ocr.page":0.5}}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, typed.Status, "%s", typed.Body)
			require.JSONEq(t, `{"namespace":"tenant-b","retention_seconds":2592000,"key_retention_seconds":null,"archive":"s3://bucket/cairn?endpoint=127.0.0.1:9000",`+
				`"type_retention_seconds":{"report.render":3600,"ocr.page":0.5}}`, string(typed.Body))
			kept := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(`{"retention_seconds":60}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, kept.Status, "%s", kept.Body)
			require.Contains(t, string(kept.Body), `"type_retention_seconds":{`, "left out, the types keep theirs")
			for body, says := range map[string]string{
				`{"type_retention_seconds":{"report":null}}`: `type_retention_seconds of "report" is null`,
				`{"type_retention_seconds":{"report":-1}}`:   `type_retention_seconds of "report" -1 is not a number of seconds`,
				`{"type_retention_seconds":{"":60}}`:         "type",
			} {
				bad := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(body), as(adminToken)...)
				require.Equal(t, http.StatusBadRequest, bad.Status, "%s: %s", body, bad.Body)
				require.Contains(t, bad.Problem.Detail, says, body)
			}
			streams := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(`{"stream_ttl_seconds":604800}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, streams.Status, "%s", streams.Body)
			require.Contains(t, string(streams.Body), `"stream_ttl_seconds":604800`)
			bad := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(`{"stream_ttl_seconds":-1}`), as(adminToken)...)
			require.Equal(t, http.StatusBadRequest, bad.Status, "%s", bad.Body)
			require.Contains(t, bad.Problem.Detail, "stream_ttl_seconds -1 is not a number of seconds")
			reset := servertest.Send(t, h, "PUT", "/v1/namespace?namespace=tenant-b", []byte(`{"retention_seconds":null,"type_retention_seconds":{}}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, reset.Status, "%s", reset.Body)
			require.JSONEq(t, `{"namespace":"tenant-b","retention_seconds":null,"key_retention_seconds":null,"archive":"s3://bucket/cairn?endpoint=127.0.0.1:9000"}`, string(reset.Body),
				"a setting left out or null takes the default")
		})
	}
}
