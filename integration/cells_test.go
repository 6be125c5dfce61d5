package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

const cellsSchema = "cells"

// cellsWorkflow is one quick step.
var cellsWorkflow = sdk.NewWorkflow("cells.echo", 1, func(ctx workflow.Context, n int) (int, error) {
	return workflow.Step(ctx, "echo", func(context.Context) (int, error) { return n, nil }, nil)
}, nil)

// Two clusters, two cells: namespace acme in cell eu, globex in cell us.
// One worker process serves both, one server serves both. The test checks
// that a namespace's tasks live in its cell only, that a cell that is down
// stops only its namespaces (the worker goes on in the other, the server
// answers it and 503 for the other, /readyz stays ready), that the cell
// resumes when it is back, and that an unknown namespace is refused by
// name.
func TestCellDownStopsOnlyItsNamespaces(t *testing.T) {
	t.Parallel()
	eu, us := startCluster(t), startCluster(t)
	path := filepath.Join(t.TempDir(), "placement.json")
	placementJSON := `{"cells": {"eu": "` + eu.url() + `&connect_timeout=2", "us": {"url": "` + us.url() + `&connect_timeout=2"}},
		"namespaces": {"acme": "eu", "globex": "us"}}`
	require.NoError(t, os.WriteFile(path, []byte(placementJSON), 0o600))

	// cairn migrate up --placement migrates every cell.
	out, err := exec.Command(cairnBinary(t), "migrate", "up", "--placement", path, "--schema", cellsSchema).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "cell eu: applied 0001_")
	require.Contains(t, string(out), "cell us: applied 0001_")
	out, err = exec.Command(cairnBinary(t), "-o", "json", "migrate", "status", "--placement", path, "--schema", cellsSchema).Output()
	require.NoError(t, err, "%s", out)
	var migrations map[string][]struct{ Applied bool }
	require.NoError(t, json.Unmarshal(out, &migrations))
	require.ElementsMatch(t, []string{"eu", "us"}, slices.Collect(maps.Keys(migrations)))
	for cell, rows := range migrations {
		require.NotEmpty(t, rows, "cell %s", cell)
		for _, r := range rows {
			require.True(t, r.Applied, "cell %s has a pending migration", cell)
		}
	}

	ctx := context.Background()
	placement, err := pgstore.LoadPlacement(path)
	require.NoError(t, err)
	opened, err := pgstore.OpenCells(ctx, placement, pgstore.CellOptions{Schema: cellsSchema, Pool: pgstore.PoolOptions{MaxConns: 6}})
	require.NoError(t, err)
	t.Cleanup(opened.Close)
	cells, err := sdk.NewCells(opened.Stores, placement.Namespaces)
	require.NoError(t, err)

	first := startCellWorker(t, cells)
	acme, globex := cellClient(t, cells, "acme"), cellClient(t, cells, "globex")

	_, err = sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: "initech"})
	require.ErrorIs(t, err, sdk.ErrInvalid)
	require.ErrorContains(t, err, `namespace "initech" is in no cell of the placement map (it places "acme", "globex")`)

	srv := startListening(t, exec.Command(cairnBinary(t), "server", "--listen", "127.0.0.1:0", "--placement", path,
		"--schema", cellsSchema, "--rescue-interval", "200ms", "--log-level", "warn", "--max-conns", "4"))

	// Both cells up: every task finishes, each in its own cell's database.
	acmeIDs, globexIDs := startEach(t, acme, 20), startEach(t, globex, 20)
	waitAllDone(t, acme, acmeIDs)
	waitAllDone(t, globex, globexIDs)
	require.Equal(t, 20, namespaceTasks(t, eu, "acme"))
	require.Equal(t, 0, namespaceTasks(t, eu, "globex"))
	require.Equal(t, 20, namespaceTasks(t, us, "globex"))
	require.Equal(t, 0, namespaceTasks(t, us, "acme"))

	// cairn namespace list --placement lists every cell's namespaces.
	out, err = exec.Command(cairnBinary(t), "-o", "json", "namespace", "list", "--placement", path, "--schema", cellsSchema).Output()
	require.NoError(t, err, "%s", out)
	require.JSONEq(t, `[{"name":"acme","cell":"eu"},{"name":"globex","cell":"us"}]`, namespaceCells(t, out))

	status, _, body := srv.call("GET", "/v1/tasks?namespace=initech", nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `namespace \"initech\" is in no cell`)

	// Cell us goes down: acme's tasks go on finishing; globex's cannot
	// start. A worker process started now, its cells opened while us is
	// down, starts at once and serves acme; it records its types in us
	// once us is back. So does a server started now.
	require.NoError(t, us.crash())
	reopened, err := pgstore.OpenCells(ctx, placement, pgstore.CellOptions{Schema: cellsSchema,
		Pool: pgstore.PoolOptions{MaxConns: 6}, ConnectTimeout: time.Second, AllowUnreachable: true})
	require.NoError(t, err)
	t.Cleanup(reopened.Close)
	require.Equal(t, []string{"us"}, slices.Collect(maps.Keys(reopened.Unreachable)))
	require.ErrorContains(t, reopened.Unreachable["us"], fmt.Sprintf("cannot reach the database at 127.0.0.1:%d", us.port))
	laterCells, err := sdk.NewCells(reopened.Stores, placement.Namespaces)
	require.NoError(t, err)
	startCellWorker(t, laterCells)
	laterSrv := startListening(t, exec.Command(cairnBinary(t), "server", "--listen", "127.0.0.1:0", "--placement", path,
		"--schema", cellsSchema, "--rescue-interval", "200ms", "--log-level", "warn", "--max-conns", "4"))
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, first.Stop(stopCtx))
	cancel()
	downIDs := startEach(t, acme, 20)
	waitAllDone(t, acme, downIDs)
	_, err = globex.StartDynamic(ctx, cellsWorkflow, 1, nil)
	require.ErrorIs(t, err, store.ErrUnavailable, "a start in the cell that is down")

	for _, s := range []*apiServer{srv, laterSrv} {
		status, _, body = s.call("GET", "/v1/tasks?namespace=acme", nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		status, header, body := s.call("GET", "/v1/tasks?namespace=globex", nil)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
		require.Contains(t, string(body), "database_unavailable")
		require.Equal(t, "1", header.Get("Retry-After"))
		status, _, body = s.call("GET", "/readyz", nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		var ready struct{ Cells map[string]string }
		require.NoError(t, json.Unmarshal(body, &ready))
		require.Equal(t, map[string]string{"eu": "ready", "us": "unreachable"}, ready.Cells)
	}
	// The listing shows the cell that answers and names the one that
	// does not, failing.
	cmd := exec.Command(cairnBinary(t), "-o", "json", "namespace", "list", "--placement", path, "--schema", cellsSchema)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	require.Error(t, err, "a cell did not answer")
	require.JSONEq(t, `[{"name":"acme","cell":"eu"}]`, namespaceCells(t, out))
	require.Contains(t, stderr.String(), `cell "us"`)

	status, _, body = srv.call("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, status, "one cell down does not fail the scrape: %s", body)
	require.Contains(t, string(body), `cairn_cell_up{cell="us"} 0`)
	require.Contains(t, string(body), `cairn_cell_up{cell="eu"} 1`)

	// Cell us is back: its namespace resumes, without restarting anything.
	require.NoError(t, us.start())
	var backIDs []uuid.UUID
	waitFor(t, 30*time.Second, "a start in cell us once it is back", func() bool {
		res, err := globex.StartDynamic(ctx, cellsWorkflow, 2, nil)
		if err == nil {
			backIDs = append(backIDs, res.ID)
		}
		return err == nil
	})
	backIDs = append(backIDs, startEach(t, globex, 19)...)
	waitAllDone(t, globex, backIDs)
	require.Equal(t, 40, namespaceTasks(t, us, "globex"))
	require.Equal(t, 40, namespaceTasks(t, eu, "acme"))
	for _, s := range []*apiServer{srv, laterSrv} {
		status, _, body = s.call("GET", "/v1/tasks?namespace=globex", nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
	}
}

// startCellWorker starts a worker serving acme and globex, in their cells.
func startCellWorker(t *testing.T, cells *sdk.Cells) *sdk.Worker {
	t.Helper()
	w, err := sdk.NewWorker(sdk.WorkerConfig{Cells: cells, Namespaces: []string{"acme", "globex"}, Concurrency: 8,
		LeaseTTL: 5 * time.Second, HeartbeatInterval: time.Second, PollInterval: 100 * time.Millisecond,
		RescueInterval: time.Second, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	sdk.Register(w, cellsWorkflow)
	startWorker(t, w)
	return w
}

func cellClient(t *testing.T, cells *sdk.Cells, namespace string) *sdk.Client {
	t.Helper()
	c, err := sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: namespace})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// startEach starts n tasks and returns their ids.
func startEach(t *testing.T, c *sdk.Client, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, 0, n)
	for i := range n {
		res, err := c.StartDynamic(context.Background(), cellsWorkflow, i, nil)
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	return ids
}

// waitAllDone waits until every task has completed.
func waitAllDone(t *testing.T, c *sdk.Client, ids []uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		task, err := c.Wait(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, task.Status, "task %s", id)
	}
}

// namespaceTasks counts a namespace's tasks in one cluster's database.
func namespaceTasks(t *testing.T, cluster *pgCluster, namespace string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), cluster.url())
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT count(*) FROM "+cellsSchema+".tasks WHERE namespace = $1", namespace).Scan(&n))
	return n
}

// namespaceCells is cairn namespace list's JSON reduced to each
// namespace's name and cell.
func namespaceCells(t *testing.T, out []byte) string {
	t.Helper()
	var rows []struct {
		Name string `json:"name"`
		Cell string `json:"cell"`
	}
	require.NoError(t, json.Unmarshal(out, &rows), "%s", out)
	b, err := json.Marshal(rows)
	require.NoError(t, err)
	return string(b)
}
