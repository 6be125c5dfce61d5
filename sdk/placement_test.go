package sdk_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func sqliteCell(t *testing.T, name string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), name+".db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestCellsPlaceNamespaces(t *testing.T) {
	t.Parallel()
	eu, us := sqliteCell(t, "eu"), sqliteCell(t, "us")
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us}, map[string]string{"acme": "eu", "globex": "us", "hooli": "eu"})
	require.NoError(t, err)
	require.Equal(t, []string{"eu", "us"}, cells.Names())
	require.Equal(t, []string{"acme", "hooli"}, cells.Namespaces("eu"))
	cell, st, err := cells.Of("globex")
	require.NoError(t, err)
	require.Equal(t, "us", cell)
	require.Same(t, us, st)

	_, _, err = cells.Of("initech")
	require.ErrorIs(t, err, sdk.ErrNotPlaced)
	require.EqualError(t, err, `namespace "initech" is in no cell of the placement map (it places "acme", "globex", "hooli"): add it under "namespaces"`)

	_, err = sdk.NewCells(map[string]store.Store{"eu": eu}, map[string]string{"acme": "us"})
	require.EqualError(t, err, `cells: namespace "acme" is placed in cell "us", which has no store (cells: "eu")`)
	_, err = sdk.NewCells(nil, nil)
	require.EqualError(t, err, "cells: no cells")
	_, err = sdk.NewCells(map[string]store.Store{"eu": nil}, nil)
	require.ErrorContains(t, err, `cell "eu" has no name or no store`)
}

// A cell that does not answer is reported down and leaves its series out;
// the other cells' series are still scraped.
func TestCellQueueCollectorReportsEachCell(t *testing.T) {
	t.Parallel()
	eu, us := sqliteCell(t, "eu"), sqliteCell(t, "us")
	enginetest.StartTask(t, eu, &enginetest.TaskOpts{Namespace: "acme", Queue: "q1"})
	enginetest.StartTask(t, us, &enginetest.TaskOpts{Namespace: "globex", Queue: "q2"})
	// A row of acme's left in us (a move's copy not yet deleted) is not us's
	// to report: it would repeat eu's series and fail the scrape.
	enginetest.StartTask(t, us, &enginetest.TaskOpts{Namespace: "acme", Queue: "q1"})
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us}, map[string]string{"acme": "eu", "globex": "us"})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sdk.NewCellQueueCollector(cells))

	up, count := scrapeCells(t, reg)
	require.Equal(t, map[string]float64{"eu": 1, "us": 1}, up)
	require.Equal(t, 8, count, "four statuses of one queue in each cell")

	require.NoError(t, us.Close()) // us is down
	up, count = scrapeCells(t, reg)
	require.Equal(t, map[string]float64{"eu": 1, "us": 0}, up)
	require.Equal(t, 4, count, "eu's queue only")
}

// scrapeCells gathers reg: each cell's cairn_cell_up, and how many
// cairn_queue_tasks series there are.
func scrapeCells(t *testing.T, reg *prometheus.Registry) (map[string]float64, int) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	up, tasks := map[string]float64{}, 0
	for _, f := range families {
		switch f.GetName() {
		case "cairn_cell_up":
			for _, m := range f.GetMetric() {
				up[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		case "cairn_queue_tasks":
			tasks += len(f.GetMetric())
		}
	}
	return up, tasks
}
