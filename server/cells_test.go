package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/jackc/pgx/v5/pgxpool"
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

	// The console lists both cells' namespaces, each with its cell.
	a = servertest.Send(t, h, "GET", "/console/namespaces?namespace=acme", nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	page := string(a.Body)
	for _, want := range []string{`?namespace=acme">acme</a></td>
<td>eu</td>`, `?namespace=globex">globex</a></td>
<td>us</td>`} {
		require.Contains(t, page, want)
	}

	// A token of acme alone sees acme's row, not even globex's name.
	tokened, err := New(Config{Cells: cells, Tokens: []Token{{Name: "acme-reader", SHA256: HashToken("acme-token"),
		Namespaces: []string{"acme"}, Roles: []Role{RoleRead}}}})
	require.NoError(t, err)
	a = servertest.Send(t, tokened.Handler(), "GET", "/console/namespaces?namespace=acme", nil, "Authorization", "Bearer acme-token")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), `?namespace=acme">acme</a>`)
	require.NotContains(t, string(a.Body), "globex")

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

// A cell that is down (a PostgreSQL cell nothing answers for) fails its
// namespace's requests, each a 503, and its warning is logged once, naming
// the cell and the namespace, not once a request; the other cell serves.
func TestDownCellIsLoggedOnceNamingIt(t *testing.T) {
	t.Parallel()
	eu, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "eu.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = eu.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close())
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+down+"/postgres?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	us, err := pgstore.New(pgstore.Config{Pool: pool})
	require.NoError(t, err)
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us}, map[string]string{"acme": "eu", "globex": "us"})
	require.NoError(t, err)
	logs := &syncBuffer{}
	srv, err := New(Config{Cells: cells, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	h := srv.Handler()
	for range 5 {
		a := servertest.Send(t, h, "GET", "/v1/tasks?namespace=globex", nil)
		require.Equal(t, http.StatusServiceUnavailable, a.Status, "%s", a.Body)
	}
	require.Equal(t, http.StatusOK, servertest.Send(t, h, "GET", "/v1/tasks?namespace=acme", nil).Status)
	require.Equal(t, 1, strings.Count(logs.String(), `msg="database unavailable"`), "%s", logs)
	require.Contains(t, logs.String(), "cell=us namespace=globex")
	require.Contains(t, logs.String(), down, "the log keeps the host the answer hides")
}

// The warnings of a cell that is down: the first at once, then one an
// interval, saying how many were left out; each cell on its own.
func TestUnavailableWarningsAreThrottledByCell(t *testing.T) {
	t.Parallel()
	l := unavailableLog{every: 10 * time.Second}
	now := time.Now()
	type answer struct {
		ok      bool
		omitted int
	}
	ask := func(cell string, at time.Duration) answer {
		ok, omitted := l.allow(cell, now.Add(at))
		return answer{ok, omitted}
	}
	require.Equal(t, answer{true, 0}, ask("us", 0))
	require.Equal(t, answer{false, 0}, ask("us", time.Second))
	require.Equal(t, answer{false, 0}, ask("us", 9*time.Second))
	require.Equal(t, answer{true, 0}, ask("eu", 9*time.Second), "another cell's first")
	require.Equal(t, answer{true, 2}, ask("us", 10*time.Second))
	require.Equal(t, answer{false, 0}, ask("us", 11*time.Second))
	require.Equal(t, answer{true, 1}, ask("us", time.Minute))
}

// syncBuffer is a bytes.Buffer a logger and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
