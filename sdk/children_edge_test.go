package sdk_test

import (
	"context"
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

// Edge cases of child workflows a review found, each once a bug.

// TestChildEndWakesItsParentWithoutAPoll: the parent's worker polls once an
// hour, so only the notification of the child's end (in the transaction
// that writes child_finished into the parent) can wake it in time. On
// PostgreSQL that notification once compared the parent's new run time
// with the transaction's start, which it always follows, and sent nothing.
func TestChildEndWakesItsParentWithoutAPoll(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, PollInterval: time.Hour})
		child := sdk.NewWorkflow("wake.child", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "double", func(context.Context) (int, error) { return 2 * n, nil }, nil)
		}, nil)
		parent := sdk.NewWorkflow("wake.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.StartChild(ctx, child, n, &workflow.ChildOpts{Queue: "kids"}).Result(ctx)
		}, nil)
		sdk.Register(b.worker, parent)
		kids := b.newWorker(t, sdk.WorkerConfig{Concurrency: 4, Queues: []string{"kids"}, PollInterval: time.Hour})
		sdk.Register(kids, child)
		startWorker(t, b.worker)
		startWorker(t, kids)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, 2, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err, "only a notification could have woken the parent before the deadline")
		require.Equal(t, 4, out)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestStartChildWhileFuturesRecord: the body starts children while futures
// record their steps on their own goroutines (under -race: no race on the
// attempt's state).
func TestStartChildWhileFuturesRecord(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 8})
		runs := make([]atomic.Int32, 32)
		child := doubler("race.double", &runs)
		parent := sdk.NewWorkflow("race.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			fs := make([]*workflow.Future[int], 8)
			for i := range fs {
				fs[i] = workflow.Go(ctx, "f", func(context.Context) (int, error) {
					time.Sleep(time.Duration(i) * 300 * time.Microsecond)
					return i, nil
				}, nil)
			}
			cs := make([]*workflow.Child[int], n)
			for i := range cs {
				cs[i] = workflow.StartChild(ctx, child, i, nil)
			}
			for _, f := range fs {
				if _, err := f.Get(ctx); err != nil {
					return 0, err
				}
			}
			sum := 0
			for _, c := range cs {
				v, err := c.Result(ctx)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}, nil)
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, 32, nil)
		require.NoError(t, err)
		sum, err := run.Result(ctx)
		if err != nil {
			logStuckWorkflow(t, b.client, run.ID)
		}
		require.NoError(t, err)
		require.Equal(t, 32*31, sum)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestRescuedParentClosesItsChildren: a parent whose worker dies on its
// last attempt is dead-lettered by the rescuer, which cancels its children
// first, as the worker would have.
func TestRescuedParentClosesItsChildren(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1})
		waiting := sdk.NewWorkflow("rescue.child", 1, func(ctx workflow.Context, n int) (int, error) {
			v, _, err := workflow.Receive[int](ctx, "go", time.Hour)
			return v, err
		}, nil)
		blocked := newSignal()
		parent := sdk.NewWorkflow("rescue.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			c := workflow.StartChild(ctx, waiting, n, nil) // started before the step runs
			if _, err := workflow.Step(ctx, "hang", func(ctx context.Context) (int, error) {
				blocked.fire()
				<-ctx.Done() // the worker dies here
				return 0, ctx.Err()
			}, nil); err != nil {
				return 0, err
			}
			return c.Result(ctx)
		}, nil)
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, waiting)
		require.NoError(t, b.worker.Start(context.Background()))
		run, err := sdk.Start(context.Background(), b.client, parent, 1, &sdk.StartOpts{MaxAttempts: 1})
		require.NoError(t, err)
		select {
		case <-blocked.ch:
		case <-time.After(testTimeout):
			t.Fatal("the parent's step never ran")
		}
		sdk.AbandonWorker(b.worker)
		stopWorker(t, b.worker)
		rescuer := b.newWorker(t, sdk.WorkerConfig{Concurrency: 4, RescueInterval: 50 * time.Millisecond})
		sdk.Register(rescuer, parent)
		sdk.Register(rescuer, waiting)
		startWorker(t, rescuer)
		require.Equal(t, history.StatusDeadLettered, waitTask(t, b.client, run.ID).Status)
		st := taskState(t, b.client, run.ID)
		require.Len(t, st.Children, 1)
		childID := uuid.MustParse(st.Children[0].ID)
		child := waitTask(t, b.client, childID)
		require.Equal(t, history.StatusCancelled, child.Status, "the dead-lettered parent's child was cancelled")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestChildWaitsSpendNoRetryBudget: a parent that waited for its children
// many times (a cap of one, six children) still has its whole retry budget
// for the step after them.
func TestChildWaitsSpendNoRetryBudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		// Each child takes long enough that its parent, held to one
		// running child, reaches its wait before the child ends: the
		// parent waits for every child (finished children are not waited
		// for, which made the count depend on the machine's speed).
		child := sdk.NewWorkflow("budget.double", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "double", func(context.Context) (int, error) {
				time.Sleep(50 * time.Millisecond)
				return 2 * n, nil
			}, nil)
		}, nil)
		var fails atomic.Int32
		parent := sdk.NewWorkflow("budget.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			ins := make([]int, n)
			for i := range ins {
				ins[i] = i
			}
			if _, err := workflow.MapChildren(ctx, child, ins, nil); err != nil {
				return 0, err
			}
			return workflow.Step(ctx, "flaky", func(context.Context) (int, error) {
				if fails.Add(1) <= 2 {
					return 0, errors.New("transient blip")
				}
				return 7, nil
			}, nil)
		}, &sdk.WorkflowOpts{MaxRunningChildren: 1, Retry: &activities.RetryPolicy{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond}})
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		// Every wait recorded, as for children slower than a parent
		// waits for them within its attempt.
		sdk.SetHeldBackLinger(b.worker, -1, 0)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, 6, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err, "two failures of three allowed attempts")
		require.Equal(t, 7, out)
		require.GreaterOrEqual(t, len(eventsOf[history.ChildWaitStartedData](taskHistory(t, b.client, run.ID))), 4, "it waited again and again")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestChildrenAwaitedOutOfOrderAndLeftBehindTheCap: results awaited last
// child first, then children started and never awaited, held back by the
// cap when the body returns: each child runs once, and the parent
// completes only once every child it started has been started.
func TestChildrenAwaitedOutOfOrderAndLeftBehindTheCap(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		runs := make([]atomic.Int32, 16)
		child := doubler("order.double", &runs)
		parent := sdk.NewWorkflow("order.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			cs := make([]*workflow.Child[int], n)
			for i := range cs {
				cs[i] = workflow.StartChild(ctx, child, i, nil)
			}
			sum := 0
			for i := n - 1; i >= 0; i-- {
				v, err := cs[i].Result(ctx)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			for i := range 5 {
				workflow.StartChild(ctx, child, 10+i, nil) // never awaited
			}
			return sum, nil
		}, &sdk.WorkflowOpts{MaxRunningChildren: 2})
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, 5, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 20, out)
		require.Len(t, taskState(t, b.client, run.ID).Children, 10)
		kids := childrenOf(t, b.client, run.ID, child.TypeName(), 10)
		for pos, k := range kids {
			waitTask(t, b.client, k.ID)
			in := pos
			if pos >= 5 {
				in = 10 + pos - 5
			}
			require.Equal(t, int32(1), runs[in].Load(), "child %d (input %d) ran once", pos, in)
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestHeldBackChildrenStartWithinTheAttempt: a parent whose starts the cap
// holds back waits within its attempt for its running children and starts
// the next ones there (made to from the first event, with time to spare),
// both while it awaits results and once its body has returned with starts
// still held back: each child starts once, at its position, and runs
// once, and the parent completes with every result in order.
func TestHeldBackChildrenStartWithinTheAttempt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		runs := make([]atomic.Int32, 20)
		child := doubler("linger.double", &runs)
		parent := sdk.NewWorkflow("linger.parent", 1, func(ctx workflow.Context, n int) ([]int, error) {
			ins := make([]int, n)
			for i := range ins {
				ins[i] = i
			}
			outs, err := workflow.MapChildren(ctx, child, ins, nil)
			for i := range 4 {
				workflow.StartChild(ctx, child, n+i, nil) // never awaited
			}
			return outs, err
		}, &sdk.WorkflowOpts{MaxRunningChildren: 3})
		sdk.Register(b.worker, parent)
		sdk.Register(b.worker, child)
		sdk.SetHeldBackLinger(b.worker, 10*time.Second, -1)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, parent, 16, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		want := make([]int, 16)
		for i := range want {
			want[i] = 2 * i
		}
		require.Equal(t, want, out)
		kids := childrenOf(t, b.client, run.ID, child.TypeName(), 20)
		for pos, k := range kids {
			waitTask(t, b.client, k.ID)
			require.Equal(t, int32(1), runs[pos].Load(), "child %d ran once", pos)
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
