package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/stretchr/testify/require"
)

// TestConnectionBudget: twenty worker processes with --max-conns 4 on a
// cluster of max_connections=100 finish every task, and the cluster still
// has room for an operator's psql (before the budget, twenty demo workers
// took every connection and locked everyone else out).
func TestConnectionBudget(t *testing.T) {
	t.Parallel()
	cluster := startCluster(t, "max_connections=100")
	bin := cairnBinary(t)
	env := append(os.Environ(), "CAIRN_DATABASE_URL="+cluster.url(), "CAIRN_SCHEMA=budget")
	migrate := exec.Command(bin, "migrate", "up")
	migrate.Env = env
	out, err := migrate.CombinedOutput()
	require.NoError(t, err, "%s", out)

	const workers, documents = 20, 200
	for i := range workers {
		cmd := exec.Command(bin, "demo", "worker", "--max-conns", "4", "--concurrency", "32", "--latency", "2ms")
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = nil, os.Stderr
		dieWithParent(cmd)
		require.NoError(t, cmd.Start(), "worker %d", i)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	submit := exec.Command(bin, "demo", "submit", "--documents", fmt.Sprint(documents), "--max-conns", "4")
	submit.Env = env
	out, err = submit.CombinedOutput()
	require.NoError(t, err, "%s", out)

	ctx := context.Background()
	pool, err := pgstore.OpenPool(ctx, cluster.url(), pgstore.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	var peak int
	waitFor(t, 3*time.Minute, "every document to finish", func() bool {
		var open, conns int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM budget.tasks WHERE status NOT IN ('completed', 'failed', 'dead_lettered', 'cancelled', 'expired')),
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&open, &conns)
		peak = max(peak, conns)
		return err == nil && open == 0
	})
	var finished int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM budget.tasks WHERE type = 'document.process'").Scan(&finished))
	require.Equal(t, documents, finished)
	require.LessOrEqual(t, peak, workers*4+2, "each worker keeps to its 4 connections (plus this test's and a finished submitter's)")

	psql := exec.Command(filepath.Join(cluster.bin, "psql"), "-h", "127.0.0.1", "-p", fmt.Sprint(cluster.port), "-U", "postgres", "-d", "postgres", "-tAc", "SELECT 1")
	out, err = psql.CombinedOutput()
	require.NoError(t, err, "psql: %s", out)
	t.Logf("peak client connections with %d workers × --max-conns 4: %d of 100", workers, peak)
}
