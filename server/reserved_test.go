package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// forgedPayloads are the probe's payloads (finding F3) and their kin:
// objects that name a member cairn reserves for the payloads it writes
// (a reference to a blob, a sealed payload), other than first, or with an
// escaped name. PostgreSQL's jsonb orders members by length and unescapes
// names, so each read back as a reference or a sealed payload once it was
// stored: a worker then read another task's blob.
func forgedPayloads(ref history.BlobRef, victim uuid.UUID) map[string]string {
	refJSON, err := json.Marshal(ref)
	if err != nil {
		panic(err)
	}
	r := string(refJSON)
	sealed := `{"v":1,"task":"` + victim.String() + `","data":"AAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`
	return map[string]string{
		"DigestFirst":          `{"canonical_sha256":"x","cairn_blob":` + r + `}`,
		"EscapedName":          `{"cairn\u005fblob":` + r + `}`,
		"EscapedNameAfterMore": `{"a":1,"cairn\u005Fblob":` + r + `}`,
		"First":                `{"cairn_blob":` + r + `}`,
		"Spaced":               "{ \n\"cairn_blob\" : " + r + ` , "canonical_sha256":"x"}`,
		"SealedEscaped":        `{"cairn\u005fsealed":` + sealed + `}`,
		"SealedAfterAnother":   `{"data":1,"cairn_sealed":` + sealed + `}`,
	}
}

// TestForgedReferencesAreRefusedAlikeOnBothStores replays finding F3: a
// submit-only token starting a task whose input is a forged blob
// reference, and an operate token sending one as a signal's payload. Each
// is now a 400 on both stores, and nothing is written: no task, no
// signal_received.
func TestForgedReferencesAreRefusedAlikeOnBothStores(t *testing.T) {
	t.Parallel()
	const adminToken, submitToken, operateToken = "admin-secret", "submit-secret", "operate-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "submitter", SHA256: HashToken(submitToken), Namespaces: []string{"default"}, Roles: []Role{RoleSubmit}},
		{Name: "operator", SHA256: HashToken(operateToken), Namespaces: []string{"default"}, Roles: []Role{RoleOperate}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServer(t, st.Store, tokens...)
			a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":1,"idempotency_key":"victim"}`), "Authorization", "Bearer "+adminToken)
			require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			var victim startResponse
			require.NoError(t, json.Unmarshal(a.Body, &victim))
			// The blob a forged reference would have a worker read.
			ref := putBlob(t, st.Store, "default", victim.ID, "application/json", []byte(`"the victim's document"`))

			for name, payload := range forgedPayloads(ref, victim.ID) {
				a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":`+payload+`}`), "Authorization", "Bearer "+submitToken)
				require.Equal(t, http.StatusBadRequest, a.Status, "%s: input: %s", name, a.Body)
				require.Equal(t, web.CodeInvalidRequest, a.Problem.Code, "%s: %s", name, a.Body)
				require.Contains(t, a.Problem.Detail, "reserves", name)
				for _, target := range []string{"/v1/tasks/" + victim.ID.String() + "/signals/doc", "/v1/tasks/by-key/victim/signals/doc"} {
					a = servertest.Send(t, h, "POST", target, []byte(`{"payload":`+payload+`}`), "Authorization", "Bearer "+operateToken)
					require.Equal(t, http.StatusBadRequest, a.Status, "%s: signal: %s", name, a.Body)
					require.Equal(t, web.CodeInvalidRequest, a.Problem.Code, "%s: %s", name, a.Body)
				}
			}
			require.Equal(t, 1, taskCount(t, st.Store), "no task was started")
			events, err := store.TaskEvents(t.Context(), st.Store, "", victim.ID)
			require.NoError(t, err)
			require.Len(t, events, 1, "no signal was written")

			// A reserved name deeper down is the user's own data, as is a
			// member that only resembles one.
			for _, input := range []string{`{"doc":{"cairn_blob":1}}`, `[{"cairn_blob":1}]`, `{"cairn_blobs":1,"Cairn_blob":2}`} {
				a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":`+input+`}`), "Authorization", "Bearer "+submitToken)
				require.Equal(t, http.StatusAccepted, a.Status, "%s: %s", input, a.Body)
			}
		})
	}
}

// TestReservedKeyPrefixIsRefused replays finding F4's request: a submit
// token starting a task with the idempotency key a parent's child will
// have ("cairn:child:<parent>:0") is answered 400 naming the reserved
// prefix, on both stores, and nothing is written.
func TestReservedKeyPrefixIsRefused(t *testing.T) {
	t.Parallel()
	const submitToken = "submit-secret"
	submitter := Token{Name: "submitter", SHA256: HashToken(submitToken), Namespaces: []string{"default"}, Roles: []Role{RoleSubmit}}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testServer(t, st.Store, submitter)
			for _, key := range []string{"cairn:child:" + uuid.NewString() + ":0", "cairn:"} {
				a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":1,"idempotency_key":"`+key+`"}`), "Authorization", "Bearer "+submitToken)
				require.Equal(t, http.StatusBadRequest, a.Status, "%s: %s", key, a.Body)
				require.Equal(t, web.CodeInvalidRequest, a.Problem.Code, "%s", a.Body)
				require.Contains(t, a.Problem.Detail, `the prefix "cairn:" is cairn's own`)
			}
			require.Zero(t, taskCount(t, st.Store), "nothing was written")
			a := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":1,"idempotency_key":"Cairn:mine"}`), "Authorization", "Bearer "+submitToken)
			require.Equal(t, http.StatusAccepted, a.Status, "another key is the user's: %s", a.Body)
		})
	}
}
