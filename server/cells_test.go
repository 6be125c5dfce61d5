package server

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/stretchr/testify/require"
)

// TestServerOverCells: each request works in its namespace's cell only; a
// namespace the map does not place is a 400 naming it, in the API and the
// console alike; /readyz lists each cell and stays ready while one
// answers.
func TestServerOverCells(t *testing.T) {
	t.Parallel()
	open := func(name string) store.Store {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), name+".db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	eu, us := open("eu"), open("us")
	servertest.RegisterDoc(t, eu, "acme")
	servertest.RegisterDoc(t, us, "globex")
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us}, map[string]string{"acme": "eu", "globex": "us"})
	require.NoError(t, err)
	srv, err := New(Config{Cells: cells})
	require.NoError(t, err)
	h := srv.Handler()

	a := servertest.Send(t, h, "POST", "/v1/tasks?namespace=acme", []byte(`{"type":"doc","input":{"id":"a"}}`))
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a = servertest.Send(t, h, "POST", "/v1/tasks?namespace=globex", []byte(`{"type":"doc","input":{"id":"g"}}`))
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	for st, want := range map[store.Store]int{eu: 1, us: 1} {
		require.Len(t, enginetest.TaskIDs(t, st), want)
	}
	// acme's task is not found through globex's cell.
	var started struct{ ID string }
	a = servertest.Send(t, h, "POST", "/v1/tasks?namespace=acme", []byte(`{"type":"doc","input":{"id":"b"}}`))
	require.NoError(t, json.Unmarshal(a.Body, &started))
	require.Equal(t, http.StatusNotFound, servertest.Send(t, h, "GET", "/v1/tasks/"+started.ID+"?namespace=globex", nil).Status)
	require.Equal(t, http.StatusOK, servertest.Send(t, h, "GET", "/v1/tasks/"+started.ID+"?namespace=acme", nil).Status)

	a = servertest.Send(t, h, "GET", "/v1/tasks?namespace=initech", nil)
	require.Equal(t, http.StatusBadRequest, a.Status)
	require.Contains(t, a.Problem.Detail, `namespace "initech" is in no cell of the placement map`)
	a = servertest.Send(t, h, "GET", "/console/?namespace=initech", nil)
	require.Equal(t, http.StatusBadRequest, a.Status, "the console says so too, not a 500")
	require.Contains(t, string(a.Body), "is in no cell of the placement map")

	ready := func() (int, map[string]string) {
		a := servertest.Send(t, h, "GET", "/readyz", nil)
		var body struct{ Cells map[string]string }
		require.NoError(t, json.Unmarshal(a.Body, &body), "%s", a.Body)
		return a.Status, body.Cells
	}
	status, states := ready()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]string{"eu": "ready", "us": "ready"}, states)
	require.NoError(t, us.(interface{ Close() error }).Close())
	status, states = ready()
	require.Equal(t, http.StatusOK, status, "one cell answering is enough")
	require.Equal(t, map[string]string{"eu": "ready", "us": "unreachable"}, states)
}
