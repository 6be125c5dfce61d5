package server

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// boundedStores are servertest.BothStores with history limits.
func boundedStores(t *testing.T, limits store.HistoryLimits) []servertest.NamedStore {
	t.Helper()
	lite, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "cairn.db"), HistoryLimits: limits})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lite.Close() })
	pg, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), HistoryLimits: limits})
	require.NoError(t, err)
	return []servertest.NamedStore{{Name: "PostgreSQL", Store: pg}, {Name: "SQLite", Store: lite}}
}

// TestSignalToAFullHistoryIsRefused replays the probe's F5 request (signal
// after signal of a large payload): at the bound the API answers 409
// history_full, with the figures, and writes nothing.
func TestSignalToAFullHistoryIsRefused(t *testing.T) {
	t.Parallel()
	for _, ns := range boundedStores(t, store.HistoryLimits{MaxBytes: 100_000}) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testServer(t, ns.Store)
			id := startDoc(t, h, "")
			target := "/v1/tasks/" + id.String() + "/signals/big"
			body := []byte(`{"payload":"` + strings.Repeat("x", 30_000) + `"}`)
			for range 3 {
				a := servertest.Send(t, h, "POST", target, body)
				require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
			}
			a := servertest.Send(t, h, "POST", target, body)
			require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
			require.Equal(t, web.CodeHistoryFull, a.Problem.Code)
			require.Equal(t, int64(100_000), a.Problem.LimitBytes)
			require.Greater(t, a.Problem.HistoryBytes, int64(90_000))
			require.Contains(t, a.Problem.Detail, "no more signals")
			events, err := store.TaskEvents(context.Background(), ns.Store, "", id)
			require.NoError(t, err)
			require.Len(t, events, 4, "nothing written")
		})
	}
}
