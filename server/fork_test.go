package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/internal/errmark"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// POST /v1/tasks/{id}/fork answers 201 with the new task, whose
// forked_from names the original; GET …/forks lists it; the fork holds
// the edited output. On both stores.
func TestForkOverHTTP(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			finished := finishTask(t, st.Store, "default")
			h := testServer(t, st.Store)
			a := servertest.Send(t, h, "POST", "/v1/tasks/"+finished+"/fork", []byte(`{"at":0,"output":{"text":"total 21,50 €"}}`))
			require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
			var fork sdk.TaskInfo
			require.NoError(t, json.Unmarshal(a.Body, &fork))
			require.Equal(t, &history.ForkOrigin{TaskID: finished, Position: 0}, fork.ForkedFrom)
			require.Equal(t, history.StatusPending, fork.Status)

			got := servertest.Send(t, h, "GET", "/v1/tasks/"+finished+"/forks", nil)
			require.Equal(t, http.StatusOK, got.Status)
			require.JSONEq(t, `{"forks":[{"task_id":"`+fork.ID.String()+`","position":0}]}`, string(got.Body))

			hist := servertest.Send(t, h, "GET", "/v1/tasks/"+fork.ID.String()+"/history", nil)
			require.Equal(t, http.StatusOK, hist.Status)
			require.Contains(t, string(hist.Body), `"copied_from_seq":3`)
			require.Contains(t, string(hist.Body), `21,50`)
		})
	}
}

// A fork starts a task with an output of the caller's choice, so fork and
// reset need submit as well as operate: an operate-only or submit-only
// token is refused with 403 and nothing is forked.
func TestForkNeedsSubmitAndOperate(t *testing.T) {
	t.Parallel()
	tokens := []Token{
		{Name: "ops", SHA256: HashToken("ops-token"), Namespaces: []string{"default"}, Roles: []Role{RoleOperate}},
		{Name: "bot", SHA256: HashToken("bot-token"), Namespaces: []string{"default"}, Roles: []Role{RoleSubmit, RoleRead}},
		{Name: "both", SHA256: HashToken("both-token"), Namespaces: []string{"default"}, Roles: []Role{RoleOperate, RoleSubmit}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			finished := finishTask(t, st.Store, "default")
			h := testServer(t, st.Store, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
			for _, route := range []string{"fork", "reset"} {
				for _, token := range []string{"ops-token", "bot-token"} {
					a := servertest.Send(t, h, "POST", "/v1/tasks/"+finished+"/"+route, []byte(`{"at":0,"output":{"text":"x"}}`), as(token)...)
					require.Equal(t, http.StatusForbidden, a.Status, "%s with %s: %s", route, token, a.Body)
				}
			}
			got := servertest.Send(t, h, "GET", "/v1/tasks/"+finished+"/forks", nil, as("ops-token")...)
			require.JSONEq(t, `{"forks":[]}`, string(got.Body))
			a := servertest.Send(t, h, "POST", "/v1/tasks/"+finished+"/fork", []byte(`{"at":0,"output":{"text":"x"}}`), as("both-token")...)
			require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
		})
	}
}

// A reset that wrote the fork but failed to end the original answers the
// failure with the fork's id (fork_task_id, Location): a retry without a
// key would fork again.
func TestResetFailureNamesTheFork(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Store: servertest.LiteStore(t)})
	require.NoError(t, err)
	fork := uuid.Must(uuid.NewV7())
	for _, tc := range []struct {
		err    error
		status int
	}{
		{errmark.Mark(errors.New("cancel task x: it is completed"), sdk.ErrTaskState), http.StatusConflict},
		{errors.New("connection reset"), http.StatusInternalServerError},
	} {
		w := httptest.NewRecorder()
		srv.writeResetError(w, httptest.NewRequest("POST", "/v1/tasks/x/reset", nil), fork, tc.err)
		require.Equal(t, tc.status, w.Code)
		require.Equal(t, "/v1/tasks/"+fork.String(), w.Header().Get("Location"))
		var p Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
		require.Equal(t, fork.String(), p.ForkTaskID)
		require.Contains(t, p.Detail, "the fork "+fork.String()+" was written")
	}
}
