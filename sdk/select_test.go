package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// selectShapes are the workflows of the select tests: a parent that
// starts a review child and selects over the signal "approval", the
// child's end and a timer of its input's length, and says which won.
type selectShapes struct {
	child  *sdk.Workflow[struct{}, string]
	parent *sdk.Workflow[time.Duration, string]
}

// newSelectShapes builds them; ship, if set, is the step the parent runs
// after its select, given what won.
func newSelectShapes(ship func(ctx context.Context, won string) (string, error)) selectShapes {
	var s selectShapes
	// The child finishes when it is told to.
	s.child = sdk.NewWorkflow("select.review", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		v, _, err := workflow.Receive[string](ctx, "finish", time.Hour)
		return "reviewed " + v, err
	}, nil)
	s.parent = sdk.NewWorkflow("select.parent", 1, func(ctx workflow.Context, timer time.Duration) (string, error) {
		child := workflow.StartChild(ctx, s.child, struct{}{}, nil)
		var won string
		_, err := workflow.Select(ctx,
			workflow.OnSignal("approval", func(v string) { won = "signal: " + v }),
			workflow.OnChild(child, func(out string, err error) { won = "child: " + out }),
			workflow.OnTimer(timer, func() { won = "timer" }),
		)
		if err != nil || ship == nil {
			return won, err
		}
		return workflow.Step(ctx, "ship", func(ctx context.Context) (string, error) { return ship(ctx, won) }, nil)
	}, nil)
	return s
}

func (s selectShapes) register(w *sdk.Worker) {
	sdk.Register(w, s.child)
	sdk.Register(w, s.parent)
}

// selectsOf returns the select decisions in task id's history.
func selectsOf(t *testing.T, c *sdk.Client, id uuid.UUID) []history.SelectMatchedData {
	return eventsOf[history.SelectMatchedData](taskHistory(t, c, id))
}

// childOf returns the id of the parent's child 0, once started.
func childOf(t *testing.T, c *sdk.Client, parent uuid.UUID) uuid.UUID {
	t.Helper()
	waitForEvent(t, c, parent, history.ChildStarted)
	started := eventsOf[history.ChildStartedData](taskHistory(t, c, parent))
	return uuid.MustParse(started[0].ChildID)
}

func requireOutputString(t *testing.T, info *sdk.TaskInfo, want string) {
	t.Helper()
	require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
	out, err := sdk.Output[string](info)
	require.NoError(t, err)
	require.Equal(t, want, out)
}

// The select waits on all three at once (one wait_started listing the
// signal and the child), and the signal sent then wins.
func TestSelectSignalWins(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		s := newSelectShapes(nil)
		s.register(b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, s.parent, time.Hour, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		waits := eventsOf[history.WaitStartedData](taskHistory(t, b.client, run.ID))
		require.Equal(t, &history.SelectWait{Signals: []string{"approval"}, Children: []int{0}}, waits[0].Select)

		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		requireOutputString(t, waitTask(t, b.client, run.ID), "signal: yes")
		m := selectsOf(t, b.client, run.ID)
		require.Len(t, m, 1)
		require.Equal(t, history.SelectSignal, m[0].Kind)
		require.Equal(t, 0, m[0].Case)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// The child finishing first wakes the parent, and its case wins.
func TestSelectChildWins(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		s := newSelectShapes(nil)
		s.register(b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, s.parent, time.Hour, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		child := childOf(t, b.client, run.ID)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		_, err = b.client.Signal(ctx, child, "finish", "ok", nil)
		require.NoError(t, err)
		requireOutputString(t, waitTask(t, b.client, run.ID), "child: reviewed ok")
		m := selectsOf(t, b.client, run.ID)
		require.Len(t, m, 1)
		require.Equal(t, history.SelectChild, m[0].Kind)
		require.Equal(t, 1, m[0].Case)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// The timer firing first wins; the child it did not wait for runs on,
// and its end later wakes nothing.
func TestSelectTimerWins(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		s := newSelectShapes(nil)
		s.register(b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, s.parent, 50*time.Millisecond, &sdk.StartOpts{})
		require.NoError(t, err)
		startWorker(t, b.worker)
		requireOutputString(t, waitTask(t, b.client, run.ID), "timer")
		m := selectsOf(t, b.client, run.ID)
		require.Len(t, m, 1)
		require.Equal(t, history.SelectTimer, m[0].Kind)
		require.Equal(t, 2, m[0].Case)
		require.Contains(t, eventTypesOf(t, b.client, run.ID), history.WaitStarted, "it waited for the timer")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// The signal wins and is recorded; the worker dies in the step after;
// the child then finishes and the timer's time passes, so all three are
// ready when the task runs again from its history: it takes the same
// branch, and a strict replay of the history agrees.
func TestSelectReplayAfterACrashTakesTheSameBranch(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		cfg := sdk.WorkerConfig{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1}
		b := setup(t, cfg)
		hung := newSignal()
		var ships atomic.Int32
		s := newSelectShapes(func(ctx context.Context, won string) (string, error) {
			if ships.Add(1) == 1 {
				hung.fire()
				<-ctx.Done() // the lease context: ends when the worker is abandoned
				return "", ctx.Err()
			}
			return "shipped after " + won, nil
		})
		sdk.Register(b.worker, s.parent)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, s.parent, 50*time.Millisecond, nil)
		require.NoError(t, err)
		// Sent first: the select finds it at once, before its timer.
		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		require.NoError(t, b.worker.Start(ctx))
		waitSignal(t, hung.ch, "the step after the select")
		sdk.AbandonWorker(b.worker)
		stopWorker(t, b.worker)
		require.Len(t, selectsOf(t, b.client, run.ID), 1, "the decision was recorded before the step")

		// The child runs and finishes; the timer's 50ms pass meanwhile.
		children := b.newWorker(t, sdk.WorkerConfig{RescueInterval: -1})
		sdk.Register(children, s.child)
		startWorker(t, children)
		_, err = b.client.Signal(ctx, childOf(t, b.client, run.ID), "finish", "ok", nil)
		require.NoError(t, err)
		waitForEvent(t, b.client, run.ID, history.ChildFinished)

		other := b.newWorker(t, sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond})
		sdk.Register(other, s.parent)
		startWorker(t, other)
		requireOutputString(t, waitTask(t, b.client, run.ID), "shipped after signal: yes")
		require.Equal(t, int32(2), ships.Load())
		m := selectsOf(t, b.client, run.ID)
		require.Len(t, m, 1, "replayed, not decided again")
		require.Equal(t, history.SelectSignal, m[0].Kind)
		types := eventTypesOf(t, b.client, run.ID)
		require.Less(t, indexOf(types, history.ChildFinished), indexOf(types, history.TaskCompleted))

		r := sdk.NewReplayer()
		require.NoError(t, sdk.RegisterReplay(r, s.parent))
		require.Nil(t, r.ReplayHistory(ctx, run.ID.String(), taskHistory(t, b.client, run.ID)), "a strict replay takes the same branch")
		stopWorker(t, other)
		stopWorker(t, children)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A signal case that loses takes nothing: the signal stays for a later
// receive of its name.
func TestSelectLosingSignalStaysForALaterReceive(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("select.loser", 1, func(ctx workflow.Context, _ struct{}) ([]string, error) {
			var first string
			won, err := workflow.Select(ctx,
				workflow.OnSignal("approval", func(v string) { first = "approval " + v }),
				workflow.OnSignal("cancel", func(v string) { first = "cancel " + v }),
			)
			if err != nil {
				return nil, err
			}
			later, ok, err := workflow.Receive[string](ctx, "approval", time.Hour)
			if err != nil || !ok {
				return nil, err
			}
			return []string{first, "case " + string(rune('0'+won)), "then " + later}, nil
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		// "cancel" comes first in the history, so it wins though it is the
		// second case.
		_, err = b.client.Signal(ctx, run.ID, "cancel", "now", nil)
		require.NoError(t, err)
		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		out, err := sdk.Output[[]string](info)
		require.NoError(t, err)
		require.Equal(t, []string{"cancel now", "case 1", "then yes"}, out)
		require.NotContains(t, eventTypesOf(t, b.client, run.ID), history.WaitStarted, "both were there: nothing waited")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
