package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestMain doubles as the entry point of helper worker processes: when
// CAIRN_HELPER is set, this binary runs that helper instead of the tests,
// so a test can start a worker in another process and kill it.
func TestMain(m *testing.M) {
	if helper := os.Getenv("CAIRN_HELPER"); helper != "" {
		os.Exit(runHelper(helper))
	}
	os.Exit(m.Run())
}

func runHelper(name string) int {
	switch name {
	case "chaos-worker":
		if err := runChaosWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos-worker:", err)
			return 1
		}
		return 0
	case "server-port":
		if err := runServerPort(); err != nil {
			fmt.Fprintln(os.Stderr, "server-port:", err)
			return 1
		}
		return 0
	case "rescue-leader":
		if err := runRescueLeader(); err != nil {
			fmt.Fprintln(os.Stderr, "rescue-leader:", err)
			return 1
		}
		return 0
	case "crash-worker":
		if err := runCrashWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "crash-worker:", err)
			return 1
		}
		return 0
	case "model-limit-worker":
		if err := runModelLimitWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "model-limit-worker:", err)
			return 1
		}
		return 0
	case "crash-kids-worker":
		if err := runCrashKidsWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "crash-kids-worker:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

// startWorker starts w and stops it, gracefully for up to 10 s, when the
// test ends.
func startWorker(t *testing.T, w *sdk.Worker) {
	t.Helper()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// startHelper starts this test binary as the named helper process.
func startHelper(t testing.TB, name string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"CAIRN_HELPER=" + name}, env...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	dieWithParent(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

var (
	buildOnce sync.Once
	cairnBin  string
	buildErr  error
)

// cairnBinary builds cmd/cairn once per test binary and returns its path.
func cairnBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-bin-")
		if err != nil {
			buildErr = err
			return
		}
		cairnBin = filepath.Join(dir, "cairn")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		cmd := exec.Command("go", "build", "-o", cairnBin, "./cmd/cairn")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/cairn: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return cairnBin
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countEvents returns how many events of typ a task has.
func countEvents(t *testing.T, c *sdk.Client, id uuid.UUID, typ history.Type) int {
	t.Helper()
	events, err := c.History(context.Background(), id)
	require.NoError(t, err)
	n := 0
	for _, e := range events {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

func eventTypes(t testing.TB, c *sdk.Client, id uuid.UUID) []history.Type {
	t.Helper()
	events, err := c.History(context.Background(), id)
	require.NoError(t, err)
	out := make([]history.Type, len(events))
	for i, e := range events {
		out[i] = e.Type()
	}
	return out
}

func newClient(t *testing.T, schema string) *sdk.Client {
	t.Helper()
	c, err := sdk.NewClient(sdk.ClientConfig{Pool: enginetest.Pool(t), Schema: schema})
	require.NoError(t, err)
	return c
}

// newStore is a PostgreSQL store over pool and schema, as newClient's
// client makes its own: what a test reads under the client with (the
// projections of what the processes wrote, their histories).
func newStore(tb testing.TB, pool *pgxpool.Pool, schema string) store.Store {
	tb.Helper()
	s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema})
	require.NoError(tb, err)
	return s
}
