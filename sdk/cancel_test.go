package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// effects records what steps and compensators did, in order.
type effects struct {
	mu  sync.Mutex
	log []string
}

func (e *effects) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *effects) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// undo returns a compensator that records "undo <name>".
func undo(e *effects, name string) workflow.Compensator {
	return workflow.Compensate(func(context.Context, string) error {
		e.add("undo " + name)
		return nil
	})
}

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestCancelPendingTaskNeverRuns(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var runs atomic.Int32
		wf := sdk.NewWorkflow("report.build", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "build", func(context.Context) (string, error) {
				runs.Add(1)
				return "report", nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "q3", &sdk.StartOpts{Delay: time.Hour})
		require.NoError(t, err)

		require.NoError(t, b.client.Cancel(ctx, res.ID, "no longer needed"))
		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusCancelled, info.Status, "cancelled at once, in the same statement")
		// Cancelling it again is not an error, and appends nothing (the
		// history below has the one cancel).
		require.NoError(t, b.client.Cancel(ctx, res.ID, "again"))
		startWorker(t, b.worker)
		stopWorker(t, b.worker)
		require.Zero(t, runs.Load())
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.CancelRequested, history.TaskCancelled}, eventTypes(events))
		require.Equal(t, "no longer needed", eventsOf[history.CancelRequestedData](events)[0].Reason)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestCancelFinishedTaskSaysItsState(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("x.done", 1, func(ctx workflow.Context, _ string) (string, error) { return "ok", nil }, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitTask(t, b.client, res.ID)
		err = b.client.Cancel(ctx, res.ID, "too late")
		require.True(t, errors.Is(err, sdk.ErrTaskState), "%v", err)
		require.ErrorContains(t, err, "it is completed; only a pending, retrying or running task can be cancelled")
		err = b.client.Compensate(ctx, res.ID, "undo")
		require.True(t, errors.Is(err, sdk.ErrTaskState), "%v", err)
		require.ErrorContains(t, err, "none of its steps has a compensator")
		stopWorker(t, b.worker)
	})
}

// Cancel during step 2 of 4: step 2's context is cancelled, steps 3 and 4
// never run, step 1 is compensated, and the task ends cancelled.
func TestCancelDuringStepTwoOfFour(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		started2 := make(chan struct{})
		var cause2 atomic.Value
		wf := sdk.NewWorkflow("order.fulfil", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "reserve", func(context.Context) (string, error) {
				e.add("reserve")
				return "r-1", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "reserve")}); err != nil {
				return "", err
			}
			if _, err := workflow.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				e.add("charge")
				close(started2)
				<-ctx.Done()
				cause2.Store(context.Cause(ctx))
				return "", ctx.Err()
			}, &workflow.StepOpts{Compensate: undo(&e, "charge")}); err != nil {
				return "", err
			}
			for _, name := range []string{"ship", "notify"} {
				if _, err := workflow.Step(ctx, name, func(context.Context) (string, error) {
					e.add(name)
					return name, nil
				}, nil); err != nil {
					return "", err
				}
			}
			return "done", nil
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "order-7", nil)
		require.NoError(t, err)
		waitSignal(t, started2, "step 2")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "customer changed their mind"))
		info := waitTask(t, b.client, res.ID)

		require.Equal(t, history.StatusCancelled, info.Status)
		require.True(t, errors.Is(cause2.Load().(error), engine.ErrCancelRequested), "step 2's context ends with the cancel: %v", cause2.Load())
		require.Equal(t, []string{"reserve", "charge", "undo reserve"}, e.all(), "steps 3 and 4 never run; only the completed step is undone")
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.CancelRequested, history.CompensationStarted, history.StepCompensated, history.TaskCancelled}, eventTypes(events))
		require.Equal(t, []int{0}, eventsOf[history.CompensationStartedData](events)[0].Steps)
		require.Equal(t, []int{0}, eventsOf[history.TaskCancelledData](events)[0].Compensated)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestCancelWhileIrreversibleStepRuns(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		started, release := make(chan struct{}), make(chan struct{})
		var ctxErr atomic.Value
		wf := sdk.NewWorkflow("payment.wire", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "wire", func(ctx context.Context) (string, error) {
				close(started)
				<-release
				ctxErr.Store(fmt.Sprint(ctx.Err()))
				e.add("wire")
				return "w-1", nil
			}, &workflow.StepOpts{Irreversible: true, Compensate: undo(&e, "wire")}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "receipt", func(context.Context) (string, error) {
				e.add("receipt")
				return "sent", nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, started, "the irreversible step")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "fraud check"))
		// The cancel reaches the worker (NOTIFY) while the step runs; the step
		// is not interrupted.
		time.Sleep(100 * time.Millisecond)
		close(release)
		info := waitTask(t, b.client, res.ID)

		require.Equal(t, history.StatusCancelled, info.Status)
		require.Equal(t, "<nil>", ctxErr.Load(), "the irreversible step's context was not cancelled")
		require.Equal(t, []string{"wire", "undo wire"}, e.all(), "the irreversible step completes, is compensated, and nothing after it runs")
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.CancelRequested,
			history.StepCompleted, history.CompensationStarted, history.StepCompensated, history.TaskCancelled},
			eventTypes(taskHistory(t, b.client, res.ID)))
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A cancel accepted while the last step, an irreversible one, runs wins
// when the step ends: the task does not complete; the step is recorded,
// compensated, and the task ends cancelled listing it.
func TestCancelWinsOverAnIrreversibleLastStep(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		started, release := make(chan struct{}), make(chan struct{})
		wf := sdk.NewWorkflow("payment.settle", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "wire", func(ctx context.Context) (string, error) {
				close(started)
				<-release
				e.add("wire")
				return "w-1", nil
			}, &workflow.StepOpts{Irreversible: true, Compensate: undo(&e, "wire")})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, started, "the irreversible step")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "fraud check"))
		time.Sleep(100 * time.Millisecond) // let the cancel reach the worker, as it may or may not
		close(release)
		info := waitTask(t, b.client, res.ID)

		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, history.StatusCancelled, info.Status, "history %v", eventTypes(events))
		require.Equal(t, []string{"wire", "undo wire"}, e.all())
		require.Empty(t, eventsOf[history.TaskCompletedData](events))
		require.Equal(t, []int{0}, eventsOf[history.TaskCancelledData](events)[0].Compensated)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestCompensatorFailingPermanentlyDeadLettersUntilRequeued(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		var refundWorks atomic.Bool
		started := make(chan struct{})
		wf := sdk.NewWorkflow("trip.book", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "hotel", func(context.Context) (string, error) {
				e.add("hotel")
				return "h-1", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "hotel")}); err != nil {
				return "", err
			}
			if _, err := workflow.Step(ctx, "flight", func(context.Context) (string, error) {
				e.add("flight")
				return "f-1", nil
			}, &workflow.StepOpts{Compensate: workflow.Compensate(func(_ context.Context, booking string) error {
				if !refundWorks.Load() {
					return activities.Permanent(activities.WithStatus(errors.Newf("refund of %s refused", booking), 409))
				}
				e.add("undo flight")
				return nil
			})}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "wait", func(ctx context.Context) (string, error) {
				close(started)
				<-ctx.Done()
				return "", ctx.Err()
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, started, "the last step")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "trip called off"))
		info := waitTask(t, b.client, res.ID)

		require.Equal(t, history.StatusDeadLettered, info.Status, "a compensator that cannot succeed needs a person")
		require.Equal(t, 409, info.LastError.Status)
		require.Equal(t, "flight", info.LastError.Step)
		events := taskHistory(t, b.client, res.ID)
		failed := eventsOf[history.CompensationFailedData](events)
		require.Len(t, failed, 1)
		require.Equal(t, 1, failed[0].Position)
		require.Contains(t, failed[0].Error.Message, "refund of f-1 refused")
		require.Equal(t, []string{"hotel", "flight"}, e.all(), "the hotel is not undone before the flight")

		refundWorks.Store(true)
		require.NoError(t, b.client.Retry(ctx, res.ID, "airline fixed refunds"))
		info = waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCancelled, info.Status)
		require.Equal(t, []string{"hotel", "flight", "undo flight", "undo hotel"}, e.all(), "reverse order of completion")
		events = taskHistory(t, b.client, res.ID)
		require.Equal(t, []int{1, 0}, eventsOf[history.TaskCancelledData](events)[0].Compensated)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestCompensateCompletedTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		wf := sdk.NewWorkflow("invoice.send", 1, func(ctx workflow.Context, _ string) (string, error) {
			for _, name := range []string{"create", "email"} {
				if _, err := workflow.Step(ctx, name, func(context.Context) (string, error) {
					e.add(name)
					return name, nil
				}, &workflow.StepOpts{Compensate: undo(&e, name)}); err != nil {
					return "", err
				}
			}
			return "sent", nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)

		require.NoError(t, b.client.Compensate(ctx, res.ID, "sent to the wrong customer"))
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCancelled, info.Status)
		require.Equal(t, []string{"create", "email", "undo email", "undo create"}, e.all())
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.StepCompleted, history.TaskCompleted, history.CompensationRequested, history.AttemptStarted,
			history.CompensationStarted, history.StepCompensated, history.StepCompensated, history.TaskCancelled}, eventTypes(events))
		require.Equal(t, "requested", eventsOf[history.CompensationStartedData](events)[0].Reason)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestPermanentFailureCompensatesAndFails(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		wf := sdk.NewWorkflow("account.open", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "create", func(context.Context) (string, error) {
				e.add("create")
				return "acct-1", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "create")}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "verify", func(context.Context) (string, error) {
				return "", activities.Permanent(errors.New("identity check refused"))
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusFailed, info.Status)
		require.Contains(t, info.LastError.Message, "identity check refused")
		require.Equal(t, []string{"create", "undo create"}, e.all())
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.CompensationStarted, history.StepCompensated, history.TaskFailed}, eventTypes(events))
		require.Equal(t, []int{0}, eventsOf[history.TaskFailedData](events)[0].Compensated)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A worker that dies after the cancel was requested loses nothing: the
// next attempt goes straight to compensation.
func TestCancelSurvivesAWorkerCrash(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		cfg := sdk.WorkerConfig{LeaseTTL: time.Second, HeartbeatInterval: 200 * time.Millisecond, RescueInterval: 100 * time.Millisecond}
		b := setup(t, cfg)
		var e effects
		hung := make(chan struct{})
		var hungOnce sync.Once
		wf := sdk.NewWorkflow("sync.crm", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "create", func(context.Context) (string, error) {
				e.add("create")
				return "c-1", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "create")}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "push", func(ctx context.Context) (string, error) {
				e.add("push")
				hungOnce.Do(func() { close(hung) })
				<-ctx.Done() // the lease context: ends when the worker is abandoned
				return "", ctx.Err()
			}, &workflow.StepOpts{Irreversible: true})
		}, nil)
		sdk.Register(b.worker, wf)
		require.NoError(t, b.worker.Start(context.Background()))
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, hung, "the step the worker dies in")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "user left"))
		sdk.AbandonWorker(b.worker) // the worker dies: nothing more is written for its attempt

		second := b.newWorker(t, cfg)
		sdk.Register(second, wf)
		startWorker(t, second)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCancelled, info.Status)
		require.Equal(t, []string{"create", "push", "undo create"}, e.all(), "the second attempt runs no step, only the compensator")
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.CancelRequested, history.LeaseExpired, history.AttemptStarted, history.CompensationStarted,
			history.StepCompensated, history.TaskCancelled}, eventTypes(taskHistory(t, b.client, res.ID)))
		stopWorker(t, second)
		_ = b.worker.Stop(ctx)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A task that gives up because its next retry would come after its
// deadline still undoes what it completed.
func TestDeadlineGiveUpCompensates(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		wf := sdk.NewWorkflow("quote.prepare", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "hold", func(context.Context) (string, error) {
				e.add("hold")
				return "h-1", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "hold")}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "price", func(context.Context) (string, error) {
				return "", errors.New("pricing service unavailable")
			}, nil)
		}, &sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Minute, Multiplier: 2,
			MaxInterval: time.Hour, Jitter: activities.NoJitter}})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "", &sdk.StartOpts{Deadline: time.Now().Add(5 * time.Second)})
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusFailed, info.Status)
		require.Equal(t, []string{"hold", "undo hold"}, e.all())
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.CompensationStarted, history.StepCompensated, history.TaskFailed}, eventTypes(taskHistory(t, b.client, res.ID)))
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A worker stopping gracefully in the middle of compensation finishes the
// compensator that runs, hands the task back, and another worker resumes
// with the next one.
func TestGracefulStopDuringCompensationHandsTheTaskBack(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		compensating, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		started := make(chan struct{})
		wf := sdk.NewWorkflow("order.place", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "reserve", func(context.Context) (string, error) {
				e.add("reserve")
				return "r", nil
			}, &workflow.StepOpts{Compensate: undo(&e, "reserve")}); err != nil {
				return "", err
			}
			if _, err := workflow.Step(ctx, "charge", func(context.Context) (string, error) {
				e.add("charge")
				return "c", nil
			}, &workflow.StepOpts{Compensate: workflow.Compensate(func(context.Context, string) error {
				once.Do(func() { close(compensating) })
				<-release
				e.add("undo charge")
				return nil
			})}); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "ship", func(ctx context.Context) (string, error) {
				close(started)
				<-ctx.Done()
				return "", ctx.Err()
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, started, "the last step")
		require.NoError(t, b.client.Cancel(ctx, res.ID, "out of stock"))
		stopWhileStepBlocked(t, b.worker, compensating, release)

		second := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(second, wf)
		startWorker(t, second)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCancelled, info.Status)
		require.Equal(t, []string{"reserve", "charge", "undo charge", "undo reserve"}, e.all(), "each compensator ran once, in reverse order")
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.StepCompleted,
			history.CancelRequested, history.CompensationStarted, history.StepCompensated, history.TaskReleased,
			history.AttemptStarted, history.StepCompensated, history.TaskCancelled}, eventTypes(taskHistory(t, b.client, res.ID)))
		stopWorker(t, second)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
