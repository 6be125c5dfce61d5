package sdk_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// replayShapes are workflows of every shape a history can have, built
// as recorded (changed false) or as a later deploy changed them (changed
// true). The changed definitions are incompatible exactly where
// incompatible says.
type replayShapes struct {
	seq, mapped, sleep, approval, receive, parent, comp, parentWait *sdk.Workflow[int, int]
	child, waitChild                                                *sdk.Workflow[int, int]
}

// replayShapeCount is how many tasks of each of the 8 shapes the test
// records: 200 histories.
const replayShapeCount = 25

func one(context.Context) (int, error) { return 1, nil }

func newReplayShapes(changed bool) replayShapes {
	var s replayShapes
	// Compatible: children of other types, finished or waiting.
	s.child = sdk.NewWorkflow("rp.child", 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "double", func(context.Context) (int, error) { return 2 * in, nil }, nil)
	}, nil)
	s.waitChild = sdk.NewWorkflow("rp.waitchild", 1, func(ctx workflow.Context, in int) (int, error) {
		_, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return in, err
	}, nil)
	// Incompatible for odd inputs: the second step is renamed for them.
	s.seq = sdk.NewWorkflow("rp.seq", 1, func(ctx workflow.Context, in int) (int, error) {
		if _, err := workflow.Step(ctx, "a", one, nil); err != nil {
			return 0, err
		}
		name := "b"
		if changed && in%2 == 1 {
			name = "b2"
		}
		if _, err := workflow.Step(ctx, name, one, nil); err != nil {
			return 0, err
		}
		return workflow.Step(ctx, "c", one, nil)
	}, nil)
	// Compatible: parallel steps.
	s.mapped = sdk.NewWorkflow("rp.map", 1, func(ctx workflow.Context, in int) (int, error) {
		f := workflow.Go(ctx, "g", one, nil)
		outs, err := workflow.Map(ctx, "m", []int{1, 2, 3}, func(_ context.Context, i int) (int, error) { return i, nil }, nil)
		if err != nil {
			return 0, err
		}
		g, err := f.Get(ctx)
		return g + outs[0] + outs[1] + outs[2], err
	}, nil)
	// Incompatible: a step added before a sleep the tasks are in.
	s.sleep = sdk.NewWorkflow("rp.sleep", 1, func(ctx workflow.Context, in int) (int, error) {
		if _, err := workflow.Step(ctx, "a", one, nil); err != nil {
			return 0, err
		}
		if changed {
			if _, err := workflow.Step(ctx, "added", one, nil); err != nil {
				return 0, err
			}
		}
		return in, workflow.Sleep(ctx, time.Hour)
	}, nil)
	// Incompatible: a step added before the approval the tasks wait for.
	s.approval = sdk.NewWorkflow("rp.approval", 1, func(ctx workflow.Context, in int) (int, error) {
		if _, err := workflow.Step(ctx, "extract", one, nil); err != nil {
			return 0, err
		}
		if changed {
			if _, err := workflow.Step(ctx, "check", one, nil); err != nil {
				return 0, err
			}
		}
		_, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return in, err
	}, nil)
	// Compatible: a receive that waited, then a step; completed.
	s.receive = sdk.NewWorkflow("rp.receive", 1, func(ctx workflow.Context, in int) (int, error) {
		v, _, err := workflow.Receive[int](ctx, "go", time.Hour)
		if err != nil {
			return 0, err
		}
		return workflow.Step(ctx, "after", func(context.Context) (int, error) { return v + in, nil }, nil)
	}, nil)
	// Compatible: children mapped, then a step; completed.
	s.parent = sdk.NewWorkflow("rp.parent", 1, func(ctx workflow.Context, in int) (int, error) {
		outs, err := workflow.MapChildren(ctx, s.child, []int{in, in + 1}, nil)
		if err != nil {
			return 0, err
		}
		return workflow.Step(ctx, "sum", func(context.Context) (int, error) { return outs[0] + outs[1], nil }, nil)
	}, nil)
	// Incompatible: a compensable step renamed; the tasks were cancelled
	// while waiting and compensated.
	s.comp = sdk.NewWorkflow("rp.comp", 1, func(ctx workflow.Context, in int) (int, error) {
		name := "reserve"
		if changed {
			name = "reserve2"
		}
		undo := workflow.Compensate(func(context.Context, int) error { return nil })
		if _, err := workflow.Step(ctx, name, one, &workflow.StepOpts{Compensate: undo}); err != nil {
			return 0, err
		}
		_, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		return in, err
	}, nil)
	// Incompatible: a step added before the child the tasks wait for.
	s.parentWait = sdk.NewWorkflow("rp.parentwait", 1, func(ctx workflow.Context, in int) (int, error) {
		if changed {
			if _, err := workflow.Step(ctx, "prepare", one, nil); err != nil {
				return 0, err
			}
		}
		return workflow.StartChild(ctx, s.waitChild, in, nil).Result(ctx)
	}, nil)
	return s
}

func (s replayShapes) replayer(t *testing.T) *sdk.Replayer {
	r := sdk.NewReplayer()
	for _, err := range []error{
		sdk.RegisterReplay(r, s.seq), sdk.RegisterReplay(r, s.mapped), sdk.RegisterReplay(r, s.sleep),
		sdk.RegisterReplay(r, s.approval), sdk.RegisterReplay(r, s.receive), sdk.RegisterReplay(r, s.parent),
		sdk.RegisterReplay(r, s.comp), sdk.RegisterReplay(r, s.parentWait), sdk.RegisterReplay(r, s.child),
		sdk.RegisterReplay(r, s.waitChild),
	} {
		require.NoError(t, err)
	}
	return r
}

func (s replayShapes) register(w *sdk.Worker) {
	for _, f := range []func(){
		func() { sdk.Register(w, s.seq) }, func() { sdk.Register(w, s.mapped) }, func() { sdk.Register(w, s.sleep) },
		func() { sdk.Register(w, s.approval) }, func() { sdk.Register(w, s.receive) }, func() { sdk.Register(w, s.parent) },
		func() { sdk.Register(w, s.comp) }, func() { sdk.Register(w, s.parentWait) }, func() { sdk.Register(w, s.child) },
		func() { sdk.Register(w, s.waitChild) },
	} {
		f()
	}
}

// recordShapes runs replayShapeCount tasks of each shape to the point
// each shape stops at, and returns their ids and the ids the changed
// definitions must flag.
func recordShapes(t *testing.T, b *testBundle) (all []uuid.UUID, diverging map[uuid.UUID]string) {
	t.Helper()
	ctx := context.Background()
	s := newReplayShapes(false)
	s.register(b.worker)
	startWorker(t, b.worker)
	diverging = map[uuid.UUID]string{}
	start := func(wf *sdk.Workflow[int, int], in int) uuid.UUID {
		run, err := sdk.Start(ctx, b.client, wf, in, nil)
		require.NoError(t, err)
		all = append(all, run.ID)
		return run.ID
	}
	var waits []func()
	for i := range replayShapeCount {
		seq := start(s.seq, i)
		if i%2 == 1 {
			diverging[seq] = "step"
		}
		waits = append(waits, func() { requireStatus(t, b.client, seq, history.StatusCompleted) })
		mapped := start(s.mapped, i)
		waits = append(waits, func() { requireStatus(t, b.client, mapped, history.StatusCompleted) })
		sleep := start(s.sleep, i)
		diverging[sleep] = "step"
		waits = append(waits, func() { waitForEvent(t, b.client, sleep, history.TimerStarted) })
		approval := start(s.approval, i)
		diverging[approval] = "receive"
		waits = append(waits, func() { waitForEvent(t, b.client, approval, history.WaitStarted) })
		recv := start(s.receive, i)
		waits = append(waits, func() {
			waitForEvent(t, b.client, recv, history.WaitStarted)
			_, err := b.client.Signal(ctx, recv, "go", 1, nil)
			require.NoError(t, err)
			requireStatus(t, b.client, recv, history.StatusCompleted)
		})
		parent := start(s.parent, i)
		waits = append(waits, func() { requireStatus(t, b.client, parent, history.StatusCompleted) })
		comp := start(s.comp, i)
		diverging[comp] = "step"
		waits = append(waits, func() {
			waitForEvent(t, b.client, comp, history.WaitStarted)
			require.NoError(t, b.client.Cancel(ctx, comp, "test"))
			requireStatus(t, b.client, comp, history.StatusCancelled)
		})
		parentWait := start(s.parentWait, i)
		diverging[parentWait] = "child"
		waits = append(waits, func() { waitForEvent(t, b.client, parentWait, history.ChildWaitStarted) })
	}
	for _, w := range waits {
		w()
	}
	stopWorker(t, b.worker)
	require.Len(t, all, 8*replayShapeCount)
	return all, diverging
}

func requireStatus(t *testing.T, c *sdk.Client, id uuid.UUID, want history.Status) {
	t.Helper()
	info := waitTask(t, c, id)
	require.Equal(t, want, info.Status, "task %s: last error %+v", id, info.LastError)
}

// flagged is the task ids in res's divergences, by kind.
func flagged(t *testing.T, res sdk.ReplayResult) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range res.Divergences {
		_, dup := out[d.TaskID]
		require.False(t, dup, "%s reported twice", d.TaskID)
		out[d.TaskID] = d.Kind
	}
	return out
}

func asStrings(m map[uuid.UUID]string) map[string]string {
	out := map[string]string{}
	for id, k := range m {
		out[id.String()] = k
	}
	return out
}

func TestReplayerFlagsExactlyTheIncompatibleHistories(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 20})
		all, diverging := recordShapes(t, b)
		ctx := context.Background()
		want := asStrings(diverging)

		// The recorded definitions replay everything: the 200 and their 75
		// children.
		same, err := newReplayShapes(false).replayer(t).ReplayTasks(ctx, b.client, nil)
		require.NoError(t, err)
		require.Equal(t, 11*replayShapeCount, same.Replayed)
		require.NoError(t, same.Err())

		changed := newReplayShapes(true).replayer(t)
		res, err := changed.ReplayTasks(ctx, b.client, nil)
		require.NoError(t, err)
		require.Equal(t, 11*replayShapeCount, res.Replayed)
		require.Equal(t, want, flagged(t, res))
		for _, d := range res.Divergences {
			require.NotEmpty(t, d.Recorded, "%s", d)
			require.NotEmpty(t, d.Called, "%s", d)
			require.Contains(t, d.Error, d.Recorded)
			switch d.Type {
			case "rp.approval":
				require.Equal(t, sdk.Divergence{TaskID: d.TaskID, Type: "rp.approval", TypeVersion: 1, Status: history.StatusPending,
					Kind: "receive", Position: 0, Recorded: "approve", Called: `(step 1 "check")`, Error: d.Error}, d)
			case "rp.seq":
				require.Equal(t, "b", d.Recorded)
				require.Equal(t, "b2", d.Called)
			}
		}
		require.ErrorIs(t, res.Err(), workflow.ErrNondeterministic)

		// Filters: one type, in-flight statuses only.
		res, err = changed.ReplayTasks(ctx, b.client, &sdk.ReplayTasksOpts{Type: "rp.approval",
			Statuses: []history.Status{history.StatusPending, history.StatusRunning, history.StatusRetrying}, Limit: min(10, replayShapeCount)})
		require.NoError(t, err)
		require.Equal(t, min(10, replayShapeCount), res.Replayed)
		require.Len(t, res.Divergences, min(10, replayShapeCount))
		_, err = changed.ReplayTasks(ctx, b.client, &sdk.ReplayTasksOpts{Limit: sdk.MaxReplayTasks + 1})
		require.ErrorIs(t, err, sdk.ErrInvalid)

		// The same from files exported as `cairn task history -o json`
		// writes them.
		dir := t.TempDir()
		for _, id := range all {
			f, err := os.Create(filepath.Join(dir, id.String()+".json"))
			require.NoError(t, err)
			require.NoError(t, b.client.ExportHistory(ctx, id, f))
			require.NoError(t, f.Close())
		}
		res, err = changed.ReplayDir(ctx, dir)
		require.NoError(t, err)
		require.Equal(t, 8*replayShapeCount, res.Replayed)
		require.Equal(t, want, flagged(t, res))
		res, err = newReplayShapes(false).replayer(t).ReplayDir(ctx, dir)
		require.NoError(t, err)
		require.NoError(t, res.Err())

		// A type the replayer has no definition of is reported, not passed.
		partial := sdk.NewReplayer()
		require.NoError(t, sdk.RegisterReplay(partial, newReplayShapes(false).seq))
		res, err = partial.ReplayDir(ctx, dir)
		require.NoError(t, err)
		kinds := map[string]int{}
		for _, d := range res.Divergences {
			kinds[d.Kind]++
		}
		require.Equal(t, map[string]int{sdk.DivergenceUnknownType: 7 * replayShapeCount}, kinds)

		// One file, and one history.
		ids := slices.Collect(func(yield func(uuid.UUID) bool) {
			for id := range diverging {
				if !yield(id) {
					return
				}
			}
		})
		sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
		res, err = changed.ReplayFile(ctx, filepath.Join(dir, ids[0].String()+".json"))
		require.NoError(t, err)
		require.Len(t, res.Divergences, 1)
		require.Equal(t, ids[0].String(), res.Divergences[0].TaskID)
		require.NotNil(t, changed.ReplayHistory(ctx, ids[0].String(), taskHistory(t, b.client, ids[0])))
	})
}

func TestReplayFileRefusesWhatIsNotAHistory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.json"), []byte(`{"not":"a history"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "y.json"), []byte(`[]`), 0o600))
	res, err := sdk.NewReplayer().ReplayDir(context.Background(), dir)
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Len(t, res.Divergences, 2)
	for _, d := range res.Divergences {
		require.Equal(t, sdk.DivergenceError, d.Kind)
	}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	require.Contains(t, string(b), `"kind":"error"`)
	_, err = sdk.NewReplayer().ReplayDir(context.Background(), filepath.Join(dir, "missing"))
	require.Error(t, err)
}

func TestReplayMainExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := sdk.NewReplayer()
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := sdk.ReplayMain(context.Background(), r, args, &sdk.ReplayMainOpts{Stdout: &out, Stderr: &errOut})
		return code, out.String(), errOut.String()
	}
	code, out, _ := run("--dir", dir)
	require.Equal(t, sdk.ReplayExitOK, code)
	require.Equal(t, "0 histories replayed, 0 would not replay\n", out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`[]`), 0o600))
	code, out, _ = run("--dir", dir, "--output", "json")
	require.Equal(t, sdk.ReplayExitDiverged, code)
	require.Contains(t, out, `"kind": "error"`)
	for _, args := range [][]string{{"--nope"}, {"--dir", dir, "--database-url", "x"}, {"--dir", dir, "--status", "done"},
		{"--database-url", "postgres://127.0.0.1:1/x", "--limit", "0"}, {"--dir", filepath.Join(dir, "missing")}, {"--dir", dir, "extra"}} {
		code, _, stderr := run(args...)
		require.Equal(t, sdk.ReplayExitUsage, code, "%v: %s", args, stderr)
	}
}
