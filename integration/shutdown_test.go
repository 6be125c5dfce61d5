package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/stretchr/testify/require"
)

// buildGracefulWorker builds testdata/gracefulworker (the worker of docs/workflows.md
// snippet as a program) into the test's temporary directory.
func buildGracefulWorker(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "gracefulworker")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/gracefulworker")
	cmd.Dir = filepath.Dir(file)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./integration/testdata/gracefulworker:\n%s", out)
	return bin
}

// watchLines copies r to os.Stderr and closes the returned channel once a
// line contains want.
func watchLines(r io.Reader, want string) <-chan struct{} {
	seen := make(chan struct{})
	go func() {
		found := false
		scanner := bufio.NewScanner(r)
		for scanner.Scan() {
			line := scanner.Text()
			_, _ = os.Stderr.WriteString("gracefulworker: " + line + "\n")
			if !found && strings.Contains(line, want) {
				found = true
				close(seen)
			}
		}
	}()
	return seen
}

// SIGTERM to a worker written as docs/workflows.md says (signal.NotifyContext and
// Worker.Run) is a graceful stop, not a crash (issue 17.5): the step under
// way finishes and is recorded, the task is released for another worker at
// once (no lease_expired, no wait for the lease), and the process exits 0.
func TestSIGTERMStopsTheREADMEWorkerGracefully(t *testing.T) {
	t.Parallel()
	bin := buildGracefulWorker(t)
	schema := enginetest.Schema(t)
	client := newClient(t, schema)
	stepDir := t.TempDir()

	res, err := client.StartDynamic(context.Background(), sdk.TypeRef{Name: "document.process", Version: 1},
		json.RawMessage(`{"ID":"inv-1"}`), nil)

	require.NoError(t, err)
	base := filepath.Join(stepDir, res.ID.String())

	proc := exec.Command(bin)
	proc.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+enginetest.DatabaseURL(t), "CAIRN_SCHEMA="+schema,
		"CAIRN_STEP_DIR="+stepDir)
	stderr, err := proc.StderrPipe()
	require.NoError(t, err)
	proc.Stdout = os.Stderr
	dieWithParent(proc)
	require.NoError(t, proc.Start())
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	t.Cleanup(func() { _ = proc.Process.Kill() })
	stopping := watchLines(stderr, "worker: stopping")

	waitFor(t, 10*time.Second, "the ocr step to begin", func() bool {
		_, err := os.Stat(base + ".started")
		return err == nil
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	select {
	case <-stopping: // the worker saw the signal while the step still waits
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not begin stopping after SIGTERM")
	}
	require.NoError(t, os.WriteFile(base+".release", nil, 0o600))

	select {
	case err := <-exited:
		require.NoError(t, err, "the worker process exits 0 after a graceful stop")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker process did not exit after SIGTERM")
	}

	effect, err := os.ReadFile(base + ".ocr")
	require.NoError(t, err, "the step under way finished")
	require.Equal(t, "inv-1", string(effect))
	events, err := client.History(context.Background(), res.ID)
	require.NoError(t, err)
	types := make([]history.Type, len(events))
	for i, e := range events {
		types[i] = e.Type()
	}
	require.NotContains(t, types, history.LeaseExpired)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted}, types[:3],
		"the step's completion recorded")
	require.Equal(t, "ocr", events[2].Data.(history.StepCompletedData).Name)
	require.Contains(t, []history.Type{history.TaskReleased, history.TaskCompleted}, types[len(types)-1],
		"released at the next step boundary (or completed, had the step ended first): %v", types)
	info := mustGet(t, client, res.ID)
	require.Empty(t, info.LeaseOwner, "no lease left to expire")
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}
