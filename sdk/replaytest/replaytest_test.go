package replaytest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/sdk/replaytest"
	"github.com/cairnflow/cairn/workflow"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so the helper's failures can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = strings.TrimSpace(strings.ReplaceAll(format, "%v", "") + " " + strings.TrimSpace(fmtArgs(args)))
	panic(r)
}

func fmtArgs(args []any) string {
	var b strings.Builder
	for _, a := range args {
		if e, ok := a.(error); ok {
			b.WriteString(e.Error())
		} else if s, ok := a.(string); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}

// run calls f with a recorder and returns what it failed with ("" when
// it passed).
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.failed
}

const history = `[
  {"seq": 1, "type": "task_scheduled", "at": "2026-12-01T10:00:00Z", "data": {"v": 1, "namespace": "default", "task_type": "greet", "type_version": 1, "queue": "default", "input": "ann", "run_at": "2026-12-01T10:00:00Z"}},
  {"seq": 2, "type": "attempt_started", "at": "2026-12-01T10:00:01Z", "attempt": 1, "data": {"v": 1, "worker_id": "w", "lease_epoch": 1, "lease_expires_at": "2026-12-01T10:00:31Z"}},
  {"seq": 3, "type": "step_completed", "at": "2026-12-01T10:00:02Z", "attempt": 1, "data": {"v": 1, "position": 0, "name": "hello", "output": "hello ann"}}
]`

func greet(step string) *sdk.Workflow[string, string] {
	return sdk.NewWorkflow("greet", 1, func(ctx workflow.Context, name string) (string, error) {
		return workflow.Step(ctx, step, func(context.Context) (string, error) { return "hello " + name, nil }, nil)
	}, nil)
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "task-1.json"), []byte(history), 0o600))
	same := sdk.NewReplayer()
	require.NoError(t, sdk.RegisterReplay(same, greet("hello")))
	require.Empty(t, run(t, func(tb testing.TB) { replaytest.Dir(tb, same, dir) }))

	renamed := sdk.NewReplayer()
	require.NoError(t, sdk.RegisterReplay(renamed, greet("hi")))
	failed := run(t, func(tb testing.TB) { replaytest.Dir(tb, renamed, dir) })
	require.Contains(t, failed, "1 of 1 histories would not replay")
	require.Contains(t, failed, `step 0: recorded hello, called hi`)

	require.Contains(t, run(t, func(tb testing.TB) { replaytest.Dir(tb, same, t.TempDir()) }), "no history")
}
