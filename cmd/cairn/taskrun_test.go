package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// startCLIWorker runs, until the test ends, a worker in the target's
// store and namespace with three workflows: cli.greet greets its input,
// cli.approve waits for the signal "ok", cli.reject fails permanently.
func startCLIWorker(t *testing.T, tg cliTarget) {
	t.Helper()
	var s store.Store
	if i := slices.Index(tg.flags, "--db"); i >= 0 {
		opened, err := sqlitestore.Open(context.Background(), tg.flags[i+1])
		require.NoError(t, err)
		t.Cleanup(func() { _ = opened.Close() })
		s = opened
	} else {
		tg.withStore(t, func(st store.Store) { s = st })
	}
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: s, Namespace: "clitest", PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	sdk.Register(w, sdk.NewWorkflow("cli.greet", 1, func(ctx workflow.Context, name string) (string, error) {
		return workflow.Step(ctx, "greet", func(context.Context) (string, error) { return "hello, " + name, nil }, nil)
	}, nil))
	sdk.Register(w, sdk.NewWorkflow("cli.approve", 1, func(ctx workflow.Context, _ struct{}) (bool, error) {
		ok, _, err := workflow.Receive[bool](ctx, "ok", time.Hour)
		return ok, err
	}, nil))
	sdk.Register(w, sdk.NewWorkflow("cli.reject", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		return "", activities.Permanent(errors.New("not this one"))
	}, nil))
	sdk.Register(w, sdk.NewWorkflow("cli.chain", 1, func(ctx workflow.Context, n int) (int, error) {
		if n == 0 {
			return 0, workflow.ContinueAsNew(ctx, 1)
		}
		return n, nil
	}, nil))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
}

// TestCLITaskShowNamesTheChain: a workflow that continued as new once;
// wait on its first id prints its last run, which names the first, and
// show on the first names the last.
func TestCLITaskShowNamesTheChain(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			startCLIWorker(t, tg)

			out, _ := tg.mustRun(t, "task", "start", "cli.chain", "--input", "0")
			first := strings.TrimSpace(out)
			out, _ = tg.mustRun(t, "task", "wait", first, "--timeout", "1m")
			require.Regexp(t, `status:\s+completed`, out)
			require.Regexp(t, `continued from:\s+`+first, out)
			last := regexp.MustCompile(`id:\s+(\S+)`).FindStringSubmatch(out)
			require.NotNil(t, last, out)
			require.NotEqual(t, first, last[1])

			out, _ = tg.mustRun(t, "task", "show", first)
			require.Regexp(t, `status:\s+continued`, out)
			require.Regexp(t, `continued as:\s+`+last[1], out)
			require.NotContains(t, out, "continued from")
		})
	}
}

// TestCLITaskStartWaitWatch tries a workflow from a shell, as a person
// would: start and wait, wait for one started earlier, watch one finish.
func TestCLITaskStartWaitWatch(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			startCLIWorker(t, tg)

			out, _ := tg.mustRun(t, "task", "start", "cli.greet", "--input", `"ada"`, "--wait", "--timeout", "1m")
			require.Regexp(t, `status:\s+completed`, out)
			require.Regexp(t, `output:\s+"hello, ada"`, out)

			_, stderr, code := reported(t, tg, "task", "start", "cli.reject", "--input", "{}", "--wait")
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, "ended dead_lettered")

			out, _ = tg.mustRun(t, "task", "start", "cli.approve", "--input", "{}", "--key", "approve-1")
			id := strings.TrimSpace(out)
			again, stderr := tg.mustRun(t, "task", "start", "cli.approve", "--input", "{}", "--key", "approve-1")
			require.Equal(t, id, strings.TrimSpace(again), "the key's task")
			require.Contains(t, stderr, `idempotency key "approve-1" was used`)

			_, stderr, code = reported(t, tg, "task", "wait", id, "--timeout", "300ms")
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, "is still pending after 300ms")

			watched := make(chan string, 1)
			go func() {
				out, stderr, err := tg.run(t, "task", "watch", id, "--poll", "50ms")
				watched <- out + stderr + errString(err)
			}()
			waitForWait(t, tg, id)
			tg.mustRun(t, "task", "signal", id, "ok", "--payload", "true")
			var seen string
			select {
			case seen = <-watched:
			case <-time.After(time.Minute):
				t.Fatal("task watch did not end when the task finished")
			}
			for _, event := range []string{"task_scheduled", "wait_started", "signal_received", "task_completed"} {
				require.Contains(t, seen, event)
			}
			require.Less(t, strings.Index(seen, "signal_received"), strings.Index(seen, "task_completed"), seen)
			require.Equal(t, 1, strings.Count(seen, "task_completed"), "each event once: %s", seen)

			out, _ = tg.mustRun(t, "task", "wait", id, "-o", "json")
			require.Contains(t, out, `"status": "completed"`)
			out, _ = tg.mustRun(t, "task", "watch", id, "-o", "json")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Contains(t, lines[len(lines)-1], `"type":"task_completed"`)

			_, stderr, code = reported(t, tg, "task", "start", "cli.nobody", "--input", "{}")
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, "cli.nobody")
			_, stderr, code = reported(t, tg, "task", "start", "cli.greet", "--input", "{")
			require.Equal(t, exitConfig, code, stderr)
			require.Contains(t, stderr, `--input "{" is not valid JSON`)
			_, stderr, code = reported(t, tg, "task", "watch", id, "--poll", "2m")
			require.Equal(t, exitConfig, code, stderr)
		})
	}
}

// waitForWait returns once task id waits (its history has wait_started).
func waitForWait(t *testing.T, tg cliTarget, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ := tg.mustRun(t, "task", "history", id)
		if strings.Contains(out, "wait_started") {
			return
		}
		require.True(t, time.Now().Before(deadline), "task %s never waited", id)
		time.Sleep(50 * time.Millisecond)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestCLIReadingCommandsCreateNoStore: a command that reads, run where no
// embedded store is, exits 2 naming the file it looked for and creates
// nothing; one that writes something new creates the store, saying so.
func TestCLIReadingCommandsCreateNoStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cairn-dev.db")
	tg := cliTarget{flags: []string{"--database-url=", "--db", path}}
	for _, args := range [][]string{
		{"task", "list"}, {"task", "show", "01935c6e-0000-7000-8000-000000000000"}, {"task", "history", "01935c6e-0000-7000-8000-000000000000"},
		{"task", "wait", "01935c6e-0000-7000-8000-000000000000"}, {"task", "watch", "01935c6e-0000-7000-8000-000000000000"},
		{"dlq", "list"}, {"queue", "list"}, {"audit"}, {"namespace", "list"}, {"schedule", "list"},
	} {
		_, stderr, code := reported(t, tg, args...)
		require.Equal(t, exitConfig, code, "cairn %v: %s", args, stderr)
		require.Contains(t, stderr, "no embedded store at "+path, "cairn %v", args)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "cairn %v created %v", args, entries)
	}
	_, stderr, code := reported(t, tg, "queue", "set", "q", "--max-waiting", "3")
	require.Equal(t, 0, code, stderr)
	require.FileExists(t, path)
	_, stderr, code = reported(t, tg, "task", "list")
	require.Equal(t, 0, code, stderr)
}
