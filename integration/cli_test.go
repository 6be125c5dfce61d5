package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// cli runs the cairn binary against the test database and schema, or,
// when dbPath is set, against the embedded store in that file with no
// database URL.
type cli struct {
	t      *testing.T
	bin    string
	url    string
	schema string
	dbPath string
	env    []string // more environment of every command
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, bin: cairnBinary(t), url: enginetest.DatabaseURL(t), schema: enginetest.Schema(t)}
}

// newEmbeddedCLI runs the binary on a fresh embedded store of the test's
// own, with CAIRN_DATABASE_URL empty.
func newEmbeddedCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, bin: cairnBinary(t), dbPath: filepath.Join(t.TempDir(), "cairn.db")}
}

// cliStores are the stores the CLI's end-to-end tests run on.
var cliStores = []struct {
	name string
	new  func(*testing.T) *cli
}{{"PostgreSQL", newCLI}, {"SQLite", newEmbeddedCLI}}

func (c *cli) command(args ...string) *exec.Cmd {
	if c.dbPath != "" {
		cmd := exec.Command(c.bin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL=", "CAIRN_DB="+c.dbPath)
		return cmd
	}
	cmd := exec.Command(c.bin, append(args, "--schema", c.schema)...)
	cmd.Env = append(append(os.Environ(), "CAIRN_DATABASE_URL="+c.url), c.env...)
	return cmd
}

// client is an sdk client on the CLI's store.
func (c *cli) client(t *testing.T) *sdk.Client {
	t.Helper()
	if c.dbPath == "" {
		return newClient(t, c.schema)
	}
	client, err := sdk.NewClient(sdk.ClientConfig{Store: c.store(t)})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

// store opens the store the commands work in (the test schema, or the
// embedded store's file), to read under the client.
func (c *cli) store(t *testing.T) store.Store {
	t.Helper()
	if c.dbPath == "" {
		return newStore(t, enginetest.Pool(t), c.schema)
	}
	s, err := sqlitestore.Open(context.Background(), c.dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// run runs a command to completion and returns its stdout; it fails the
// test on a non-zero exit.
func (c *cli) run(args ...string) []byte {
	c.t.Helper()
	cmd := c.command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(c.t, err, "cairn %s\nstderr: %s", strings.Join(args, " "), stderr.String())
	return out
}

type taskJSON struct {
	ID        uuid.UUID          `json:"id"`
	Type      string             `json:"type"`
	Status    history.Status     `json:"status"`
	Attempt   int                `json:"attempt"`
	CreatedAt time.Time          `json:"created_at"`
	Output    json.RawMessage    `json:"output"`
	LastError *history.ErrorInfo `json:"last_error"`
}

type eventJSON struct {
	Seq     int64           `json:"seq"`
	Type    history.Type    `json:"type"`
	At      time.Time       `json:"at"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
}

func TestCLIDemoRunFinishesEveryTask(t *testing.T) {
	t.Parallel()
	for _, store := range cliStores {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			testDemoRunFinishesEveryTask(t, store.new(t))
		})
	}
}

func testDemoRunFinishesEveryTask(t *testing.T, c *cli) {
	var summary struct {
		Documents, Completed, Failed, Unfinished, Retried int
		DeadLettered                                      int     `json:"dead_lettered"`
		P50                                               float64 `json:"p50_ms"`
		P99                                               float64 `json:"p99_ms"`
		Example                                           string  `json:"example_task_id"`
	}
	out := c.run("demo", "run", "--documents", "200", "--latency", "5ms", "--seed", "42", "-o", "json")
	require.NoError(t, json.Unmarshal(out, &summary), "%s", out)
	require.Equal(t, 200, summary.Documents)
	require.Zero(t, summary.Unfinished)
	require.Equal(t, 200, summary.Completed+summary.Failed+summary.DeadLettered)
	require.Positive(t, summary.Completed)
	require.Positive(t, summary.Retried, "a 10%% failure rate retries some tasks")
	require.LessOrEqual(t, summary.P50, summary.P99)

	var tasks []taskJSON
	require.NoError(t, json.Unmarshal(c.run("task", "list", "--limit", "500", "-o", "json"), &tasks))
	require.Len(t, tasks, 201, "200 documents and the batch that started them")
	types := map[string]int{}
	for _, task := range tasks {
		types[task.Type]++
		require.True(t, task.Status.Terminal(), "task %s is %s", task.ID, task.Status)
		require.False(t, task.CreatedAt.IsZero())
	}
	require.Equal(t, map[string]int{"document.process": 200, "demo.batch": 1}, types)
	var failed []taskJSON
	require.NoError(t, json.Unmarshal(c.run("task", "list", "--status", "failed", "-o", "json"), &failed))
	require.Len(t, failed, summary.Failed)

	var shown taskJSON
	require.NoError(t, json.Unmarshal(c.run("task", "show", summary.Example, "-o", "json"), &shown))
	require.Equal(t, summary.Example, shown.ID.String())
	require.Greater(t, shown.Attempt, 1)

	var events []eventJSON
	require.NoError(t, json.Unmarshal(c.run("task", "history", summary.Example, "-o", "json"), &events))
	require.NotEmpty(t, events)
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq, "events in order")
		if i > 0 {
			require.False(t, e.At.Before(events[i-1].At), "event times never go back")
		}
	}
	require.Equal(t, history.TaskScheduled, events[0].Type)
	require.Contains(t, []history.Type{history.TaskCompleted, history.TaskFailed, history.TaskDeadLettered}, events[len(events)-1].Type)
	require.Contains(t, typesOf(events), history.AttemptFailed, "a retried task's history shows the failed attempt")

	enginetest.RequireProjectionsMatch(t, c.store(t))
}

func typesOf(events []eventJSON) []history.Type {
	out := make([]history.Type, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// TestCLIDemoWorkersFinishEverythingWhenOneIsKilled is the crash and
// resume test: two worker processes, one killed with SIGKILL mid-run; its
// tasks are rescued when their leases expire and finish exactly once. On
// SQLite the two processes share the file (its lock serializes their
// writes).
func TestCLIDemoWorkersFinishEverythingWhenOneIsKilled(t *testing.T) {
	t.Parallel()
	for _, store := range cliStores {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			testDemoWorkersFinishEverythingWhenOneIsKilled(t, store.new(t))
		})
	}
}

func testDemoWorkersFinishEverythingWhenOneIsKilled(t *testing.T, c *cli) {
	var ids []uuid.UUID
	require.NoError(t, json.Unmarshal(c.run("demo", "submit", "--documents", "150", "-o", "json"), &ids))
	require.Len(t, ids, 150)

	workerArgs := []string{"demo", "worker", "--concurrency", "8", "--latency", "30ms",
		"--lease-ttl", "2s", "--rescue-interval", "300ms", "--shutdown-timeout", "20s"}
	var workers []*exec.Cmd
	for range 2 {
		w := c.command(workerArgs...)
		w.Stderr = os.Stderr
		require.NoError(t, w.Start())
		t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
		workers = append(workers, w)
	}

	client := c.client(t)
	finished := func() int {
		n := 0
		for _, id := range ids {
			if mustGet(t, client, id).Status.Terminal() {
				n++
			}
		}
		return n
	}
	waitFor(t, time.Minute, "some tasks finished", func() bool { return finished() >= 30 })
	require.NoError(t, workers[0].Process.Signal(syscall.SIGKILL))
	_ = workers[0].Wait()

	waitFor(t, 2*time.Minute, "every task finished by the surviving worker", func() bool { return finished() == len(ids) })
	require.NoError(t, workers[1].Process.Signal(syscall.SIGTERM))
	require.NoError(t, workers[1].Wait(), "the surviving worker shuts down cleanly on SIGTERM")

	byTask, err := c.store(t).EventList(context.Background(), store.EventListAll("", ids...))
	require.NoError(t, err)
	rescued := 0
	for _, id := range ids {
		steps := map[int]int{}
		terminal := 0
		for _, e := range byTask[id] {
			if p, ok := e.Data.(history.StepCompletedData); ok {
				steps[p.Position]++
			}
			if e.Type() == history.LeaseExpired {
				rescued++
			}
			switch e.Type() {
			case history.TaskCompleted, history.TaskFailed, history.TaskDeadLettered:
				terminal++
			}
		}
		for pos, n := range steps {
			require.Equal(t, 1, n, "task %s: step %d recorded once", id, pos)
		}
		require.Equal(t, 1, terminal, "task %s finished exactly once", id)
	}
	require.Positive(t, rescued, "the killed worker's tasks were rescued after their leases expired")
	require.Equal(t, len(ids), enginetest.RequireProjectionsMatch(t, c.store(t)))
}

func TestCLIWithUnreachableDatabaseSaysWhatToSet(t *testing.T) {
	t.Parallel()
	bin := cairnBinary(t)
	for _, url := range []string{"postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"} {
		cmd := exec.Command(bin, "task", "list")
		cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+url)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "url %q", url)
		require.Equal(t, 2, exit.ExitCode(), "url %q", url)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Len(t, lines, 1, "one line, no stack trace: %q", stderr.String())
		require.Contains(t, lines[0], "CAIRN_DATABASE_URL")
		require.Empty(t, stdout.String())
	}
}

// TestReadmeFirstCommandNeedsNoDatabase runs the README quick start's first
// command, `go run ./cmd/cairn demo run --documents 200`, as a new user
// would on a machine without PostgreSQL: no database URL in the
// environment, in a fresh directory. It runs the demo to the end on the
// embedded store, which it leaves in ./cairn-dev.db.
func TestReadmeFirstCommandNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(file)), "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "go run ./cmd/cairn demo run --documents 200\n", "the README's first command")

	dir := t.TempDir()
	cmd := exec.Command(cairnBinary(t), "demo", "run", "--documents", "200", "-o", "json")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	var summary struct {
		Documents, Completed, Failed, Unfinished int
		DeadLettered                             int `json:"dead_lettered"`
	}
	require.NoError(t, json.Unmarshal(out, &summary), "%s", out)
	require.Equal(t, 200, summary.Documents)
	require.Zero(t, summary.Unfinished)
	require.Equal(t, 200, summary.Completed+summary.Failed+summary.DeadLettered)
	require.FileExists(t, filepath.Join(dir, "cairn-dev.db"))

	c := &cli{t: t, dbPath: filepath.Join(dir, "cairn-dev.db")}
	require.Equal(t, 201, enginetest.RequireProjectionsMatch(t, c.store(t)), "200 documents and their batch")
}

// A demo worker started with --health-listen serves its liveness,
// readiness and metrics: ready once it runs, gone once SIGTERM stops it.
func TestCLIDemoWorkerServesItsHealth(t *testing.T) {
	t.Parallel()
	for _, store := range cliStores {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			c := store.new(t)
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			w := c.command("demo", "worker", "--concurrency", "2", "--health-listen", addr)
			w.Stderr = os.Stderr
			require.NoError(t, w.Start())
			t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
			get := func(path string) (int, string) {
				res, err := http.Get("http://" + addr + path)
				if err != nil {
					return 0, err.Error()
				}
				defer res.Body.Close()
				body, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(body)
			}
			waitFor(t, 30*time.Second, "the worker ready", func() bool { status, _ := get("/readyz"); return status == http.StatusOK })
			status, body := get("/healthz")
			require.Equal(t, http.StatusOK, status, body)
			require.Contains(t, body, `"status":"live"`)
			status, body = get("/metrics")
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, body, "cairn_notifiers_polling")
			require.Contains(t, body, "go_goroutines")
			require.NoError(t, w.Process.Signal(syscall.SIGTERM))
			require.NoError(t, w.Wait(), "a clean stop on SIGTERM")
			status, _ = get("/readyz")
			require.Zero(t, status, "nothing is served once the worker has exited")
		})
	}
}
