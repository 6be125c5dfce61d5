package sdk_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// doubler is a child workflow: one step that doubles its input, counting
// its runs by input.
func doubler(typ string, runs *[]atomic.Int32) *sdk.Workflow[int, int] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, n int) (int, error) {
		return workflow.Step(ctx, "double", func(context.Context) (int, error) {
			(*runs)[n].Add(1)
			return 2 * n, nil
		}, nil)
	}, nil)
}

// childrenOf returns the tasks of type typ, all of which must be children
// of parent, by position.
func childrenOf(t *testing.T, c *sdk.Client, parent uuid.UUID, typ string, n int) map[int]*sdk.TaskInfo {
	t.Helper()
	all, err := tasksOfType(context.Background(), c, typ)
	require.NoError(t, err)
	byPos := map[int]*sdk.TaskInfo{}
	for _, info := range all {
		require.NotNil(t, info.ParentID, "task %s is no child", info.ID)
		require.Equal(t, parent, *info.ParentID)
		_, dup := byPos[info.ParentPosition]
		require.False(t, dup, "two children at position %d", info.ParentPosition)
		byPos[info.ParentPosition] = info
	}
	require.Len(t, byPos, n, "children started")
	return byPos
}

// TestThousandChildrenEachStartedOnceAcrossAParentCrash fans a parent out
// to 1,000 children, under the cap of 100 running at once, in two halves;
// the parent's worker crashes between them. Each child is started exactly
// once and runs once, and the parent completes with all their results.
// childFanOut is the fan-out of the crash test.
var childFanOut = 1000

func TestThousandChildrenEachStartedOnceAcrossAParentCrash(t *testing.T) {
	t.Parallel()
	n := childFanOut
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		// The lease outlives a loaded machine's stalled heartbeats (seen
		// for ~3 s under the full -race suite): this worker rescues
		// nothing, so a lease lost before the crash would hold the parent
		// until the test's timeout. The second worker rescues the crashed
		// parent when its lease expires.
		b := setup(t, sdk.WorkerConfig{Concurrency: 50, LeaseTTL: 5 * time.Second, HeartbeatInterval: 250 * time.Millisecond, RescueInterval: -1})
		runs := make([]atomic.Int32, n)
		child := doubler("fan.double", &runs)
		blocked := newSignal()
		var midRuns atomic.Int32
		parent := sdk.NewWorkflow("fan.parent", 1, func(ctx workflow.Context, count int) (int, error) {
			inputs := make([]int, count)
			for i := range inputs {
				inputs[i] = i
			}
			first, err := workflow.MapChildren(ctx, child, inputs[:count/2], nil)
			if err != nil {
				return 0, err
			}
			if _, err := workflow.Step(ctx, "mid", func(ctx context.Context) (int, error) {
				if midRuns.Add(1) == 1 {
					blocked.fire()
					<-ctx.Done() // the worker crashes here
					return 0, ctx.Err()
				}
				return 0, nil
			}, nil); err != nil {
				return 0, err
			}
			second, err := workflow.MapChildren(ctx, child, inputs[count/2:], nil)
			if err != nil {
				return 0, err
			}
			sum := 0
			for _, v := range append(first, second...) {
				sum += v
			}
			return sum, nil
		}, nil)
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		require.NoError(t, b.worker.Start(context.Background()))
		run, err := sdk.Start(context.Background(), b.client, parent, n, nil)
		require.NoError(t, err)
		select {
		case <-blocked.ch:
		case <-time.After(2 * testTimeout):
			t.Fatalf("the parent never reached its middle step; %s", describeParent(b.client, run.ID, child.TypeName()))
		}
		sdk.AbandonWorker(b.worker)
		stopWorker(t, b.worker)
		childrenOf(t, b.client, run.ID, child.TypeName(), n/2)

		second := b.newWorker(t, sdk.WorkerConfig{Concurrency: 50, RescueInterval: 50 * time.Millisecond})
		sdk.Register(second, parent)
		sdk.Register(second, child)
		startWorker(t, second)
		ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
		defer cancel()
		sum, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, n*(n-1), sum, "the sum of every child's output")

		kids := childrenOf(t, b.client, run.ID, child.TypeName(), n)
		for pos := range n {
			require.Equal(t, history.StatusCompleted, kids[pos].Status)
			require.Equal(t, int32(1), runs[pos].Load(), "child %d ran once", pos)
		}
		state := taskState(t, b.client, run.ID)
		require.Len(t, state.Children, n)
		for _, c := range state.Children {
			require.True(t, c.Finished)
		}
		stopWorker(t, second)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestCancelledParentLeavesNoChildRunning cancels a parent whose children
// block: the running children are cancelled (an abandoned one runs on),
// the ones the cap held back never start, and the parent ends cancelled.
func TestCancelledParentLeavesNoChildRunning(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 20})
		var running atomic.Int32
		release := newSignal()
		child := sdk.NewWorkflow("cancel.child", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "block", func(ctx context.Context) (int, error) {
				running.Add(1)
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-release.ch:
					return n, nil
				}
			}, nil)
		}, nil)
		parent := sdk.NewWorkflow("cancel.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			kept := workflow.StartChild(ctx, child, -1, &workflow.ChildOpts{OnParentClose: workflow.ParentCloseAbandon})
			inputs := make([]int, 20)
			outs, err := workflow.MapChildren(ctx, child, inputs, nil)
			if err != nil {
				return 0, err
			}
			_, _ = kept.Result(ctx)
			return len(outs), nil
		}, &sdk.WorkflowOpts{MaxRunningChildren: 6})
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		startWorker(t, b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return running.Load() == 6 }, testTimeout, 10*time.Millisecond, "six children run")
		require.NoError(t, b.client.Cancel(ctx, run.ID, "no longer needed"))
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCancelled, info.Status)

		kids := childrenOf(t, b.client, run.ID, child.TypeName(), 6)
		for pos, k := range kids {
			if pos == 0 {
				continue // abandoned: still running
			}
			k = waitTask(t, b.client, k.ID) // a cancel stops it at its checkpoint
			require.Equal(t, history.StatusCancelled, k.Status, "child %d", pos)
		}
		abandoned, err := b.client.Get(ctx, kids[0].ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusRunning, abandoned.Status, "an abandoned child runs on")
		release.fire()
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, kids[0].ID).Status)
		require.Equal(t, int32(6), running.Load(), "the held-back children never started")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Children whose last step is irreversible, running when their parent is
// cancelled, end cancelled when the step ends, not completed: the parent's
// cancel reaches them (cancel_requested, by the default close policy)
// before their terminal events, so it wins and their steps are undone. The
// parent, with no compensable step of its own, ends cancelled with none
// compensated.
func TestCancelledParentsIrreversibleChildrenAreUndone(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 8})
		var running, undone atomic.Int32
		release := newSignal()
		child := sdk.NewWorkflow("settle.child", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "transfer", func(context.Context) (int, error) {
				running.Add(1)
				<-release.ch
				return n, nil
			}, &workflow.StepOpts{Irreversible: true, Compensate: workflow.Compensate(func(context.Context, int) error {
				undone.Add(1)
				return nil
			})})
		}, nil)
		parent := sdk.NewWorkflow("settle.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			outs, err := workflow.MapChildren(ctx, child, []int{1, 2, 3}, nil)
			return len(outs), err
		}, nil)
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		startWorker(t, b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return running.Load() == 3 }, testTimeout, 10*time.Millisecond, "three children run")
		require.NoError(t, b.client.Cancel(ctx, run.ID, "order withdrawn"))
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCancelled, info.Status)
		events := taskHistory(t, b.client, run.ID)
		require.Empty(t, eventsOf[history.TaskCancelledData](events)[0].Compensated, "the parent has no step of its own to undo")

		kids := childrenOf(t, b.client, run.ID, child.TypeName(), 3)
		for pos, k := range kids {
			require.Eventually(t, func() bool {
				return len(eventsOf[history.CancelRequestedData](taskHistory(t, b.client, k.ID))) == 1
			}, testTimeout, 10*time.Millisecond, "child %d: its cancel is on record", pos)
		}
		release.fire()
		for pos, k := range kids {
			k = waitTask(t, b.client, k.ID)
			require.Equal(t, history.StatusCancelled, k.Status, "child %d", pos)
			events := taskHistory(t, b.client, k.ID)
			require.Equal(t, []int{0}, eventsOf[history.TaskCancelledData](events)[0].Compensated, "child %d", pos)
		}
		require.Equal(t, int32(3), undone.Load())
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestFailedChildEvidenceReachesTheParent: a child that fails permanently
// is a *workflow.ChildError in its parent, carrying the child's evidence;
// a parent that returns it fails permanently with it.
func TestFailedChildEvidenceReachesTheParent(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		child := sdk.NewWorkflow("evidence.child", 1, func(ctx workflow.Context, page int) (int, error) {
			return workflow.Step(ctx, "ocr", func(context.Context) (int, error) {
				return 0, activities.Permanent(errors.Newf("page %d unreadable", page))
			}, nil)
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		type seen struct {
			Status, Message, Step string
			Position              int
		}
		catching := sdk.NewWorkflow("evidence.catch", 1, func(ctx workflow.Context, _ struct{}) (seen, error) {
			_, err := workflow.StartChild(ctx, child, 3, nil).Result(ctx)
			var ce *workflow.ChildError
			if !errors.As(err, &ce) {
				return seen{}, fmt.Errorf("want a ChildError, got %v", err)
			}
			return seen{Status: string(ce.Status), Message: ce.Info.Message, Step: ce.Info.Step, Position: ce.Position}, nil
		}, nil)
		failing := sdk.NewWorkflow("evidence.fail", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			return workflow.StartChild(ctx, child, 7, nil).Result(ctx)
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		sdk.Register(b.worker, child)
		sdk.Register(b.worker, catching)
		sdk.Register(b.worker, failing)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		caught, err := sdk.Start(ctx, b.client, catching, struct{}{}, nil)
		require.NoError(t, err)
		got, err := caught.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, seen{Status: "failed", Message: "page 3 unreadable", Step: "ocr", Position: 0}, got)

		failed, err := sdk.Start(ctx, b.client, failing, struct{}{}, nil)
		require.NoError(t, err)
		_, err = failed.Result(ctx)
		var te *sdk.TaskError
		require.ErrorAs(t, err, &te)
		require.Equal(t, history.StatusFailed, te.Status)
		require.Equal(t, "child_failed", te.Kind)
		require.Equal(t, history.Permanent, te.Class)
		require.Contains(t, te.Message, "page 7 unreadable")
		// The outcome is an audit query over the histories: which children
		// failed, and with what.
		var audited []sdk.AuditRecord
		filter, err := sdk.CompileEventFilter(`event.type == "child_finished" && event.data.status == "failed" && event.data.error.message.contains("unreadable")`)
		require.NoError(t, err)
		require.NoError(t, b.client.Audit(ctx, sdk.AuditParams{Filter: filter}, func(r sdk.AuditRecord) error {
			audited = append(audited, r)
			return nil
		}))
		require.Len(t, audited, 2, "both parents' child_finished")
		parents := map[uuid.UUID]bool{}
		for _, r := range audited {
			parents[r.Task.ID] = true
			require.Equal(t, history.ChildFinished, r.Event.Type)
		}
		require.Equal(t, map[uuid.UUID]bool{caught.ID: true, failed.ID: true}, parents)

		types := eventTypesOf(t, b.client, failed.ID)
		require.Contains(t, types, history.ChildFinished)
		require.Equal(t, []history.Type{history.AttemptFailed, history.TaskFailed}, types[len(types)-2:])
		require.Len(t, eventsOf[history.AttemptFailedData](taskHistory(t, b.client, failed.ID)), 1, "a child's outcome is not retried")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestReorderedChildIsNondeterministic: a parent that starts a child of
// another type at a recorded position fails, naming both types and the
// position.
func TestReorderedChildIsNondeterministic(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		runs := make([]atomic.Int32, 2)
		first, second := doubler("reorder.first", &runs), doubler("reorder.second", &runs)
		var attempts atomic.Int32
		parent := sdk.NewWorkflow("reorder.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			if attempts.Add(1) == 1 {
				return workflow.StartChild(ctx, first, 1, nil).Result(ctx)
			}
			return workflow.StartChild(ctx, second, 1, nil).Result(ctx)
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		for _, wf := range []*sdk.Workflow[int, int]{first, second} {
			sdk.Register(b.worker, wf)
		}
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, nil)
		require.NoError(t, err)
		_, err = run.Result(ctx)
		var te *sdk.TaskError
		require.ErrorAs(t, err, &te)
		require.Equal(t, "nondeterminism", te.Kind)
		require.Contains(t, te.Message, `child 0: history recorded a child of type "reorder.first", workflow started a child of type "reorder.second"`)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// taskState replays a task's history.
func taskState(t *testing.T, c *sdk.Client, id uuid.UUID) history.State {
	t.Helper()
	state, err := history.Replay(taskHistory(t, c, id))
	require.NoError(t, err)
	return state
}

// describeParent says where a parent and its children of type typ stand:
// the evidence a stuck fan-out test leaves.
func describeParent(c *sdk.Client, parent uuid.UUID, typ string) string {
	ctx := context.Background()
	info, err := c.Get(ctx, parent)
	if err != nil {
		return fmt.Sprintf("parent: %v", err)
	}
	events, err := c.History(ctx, parent)
	if err != nil {
		return fmt.Sprintf("parent history: %v", err)
	}
	var last []string
	for _, e := range events[max(0, len(events)-8):] {
		last = append(last, fmt.Sprintf("%d %s %s", e.Seq, e.Data.EventType(), e.At.Format(time.StampMicro)))
	}
	kids, err := tasksOfType(ctx, c, typ)
	if err != nil {
		return fmt.Sprintf("children: %v", err)
	}
	byStatus := map[history.Status]int{}
	for _, k := range kids {
		byStatus[k.Status]++
	}
	return fmt.Sprintf("parent %s, run at %s, attempt %d, %d events, last: %v; children by status: %v (now %s)",
		info.Status, info.RunAt.Format(time.StampMicro), info.Attempt, len(events), last, byStatus, time.Now().UTC().Format(time.StampMicro))
}

// tasksOfType lists every task of type typ, page by page.
func tasksOfType(ctx context.Context, c *sdk.Client, typ string) ([]*sdk.TaskInfo, error) {
	var all []*sdk.TaskInfo
	var before uuid.UUID
	for {
		page, err := c.List(ctx, &sdk.ListOpts{Type: typ, Limit: sdk.MaxListLimit, Before: before})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < sdk.MaxListLimit {
			return all, nil
		}
		before = page[len(page)-1].ID
	}
}

// TestChildrenInheritTheParentsTenant: a child started without a fairness
// key is for its parent's tenant (key and weight); one given a key keeps
// it. A tenant's budget and usage then cover its batches.
func TestChildrenInheritTheParentsTenant(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var runs = make([]atomic.Int32, 4)
		child := doubler("tenant.child", &runs)
		parent := sdk.NewWorkflow("tenant.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			a := workflow.StartChild(ctx, child, 1, nil)
			o := workflow.StartChild(ctx, child, 2, &workflow.ChildOpts{FairnessKey: "other"})
			x, err := a.Result(ctx)
			if err != nil {
				return 0, err
			}
			y, err := o.Result(ctx)
			return x + y, err
		}, nil)
		sdk.Register(b.worker, child)
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, &sdk.StartOpts{FairnessKey: "acme", FairnessWeight: 3})
		require.NoError(t, err)
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, got)
		kids := childrenOf(t, b.client, run.ID, "tenant.child", 2)
		require.Equal(t, "acme", kids[0].FairnessKey)
		require.Equal(t, 3, kids[0].FairnessWeight)
		require.Equal(t, "other", kids[1].FairnessKey)
		require.Equal(t, 0, kids[1].FairnessWeight)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
