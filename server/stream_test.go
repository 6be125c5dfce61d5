package server

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/server/internal/servertest"
)

// GET /v1/tasks/{id}/stream refuses before it streams: a cursor that is
// not a seq, a flag that is not one, a task that is not there.
func TestTaskStreamRefusals(t *testing.T) {
	t.Parallel()
	h := testServer(t, servertest.LiteStore(t))
	missing := "/v1/tasks/" + uuid.NewString() + "/stream"
	for _, tc := range []struct {
		path   string
		header []string
		status int
		says   string
	}{
		{missing + "?from=-1", nil, http.StatusBadRequest, `from "-1" is not a stream entry's seq`},
		{missing, []string{"Last-Event-ID", "x"}, http.StatusBadRequest, `Last-Event-ID "x" is not a stream entry's seq`},
		{missing + "?events=yes", nil, http.StatusBadRequest, `events "yes" is neither true nor false`},
		{"/v1/tasks/nope/stream", nil, http.StatusBadRequest, "is not a UUID"},
		{missing, nil, http.StatusNotFound, ""},
	} {
		got := servertest.Send(t, h, "GET", tc.path, nil, tc.header...)
		require.Equal(t, tc.status, got.Status, "%s: %s", tc.path, got.Body)
		require.Contains(t, got.Problem.Detail, tc.says, tc.path)
	}
}
