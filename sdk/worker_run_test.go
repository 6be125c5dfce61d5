package sdk_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// stopLogged is a slog handler that fires stopping when the worker logs
// that its graceful stop began: the test's way to know, without sleeping,
// that a cancelled context has been seen.
type stopLogged struct {
	slog.Handler
	stopping *signal
}

func newStopLogged() *stopLogged {
	return &stopLogged{Handler: slog.DiscardHandler, stopping: newSignal()}
}

func (h *stopLogged) Enabled(context.Context, slog.Level) bool { return true }

func (h *stopLogged) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "worker: stopping") {
		h.stopping.fire()
	}
	return nil
}

// runInBackground runs w.Run(ctx) on a goroutine and returns what it
// returned, through a channel.
func runInBackground(ctx context.Context, w *sdk.Worker) <-chan error {
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	return ran
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Cancelling Run's context mid-step is a graceful stop, not a crash: the
// step finishes and is recorded, the task is handed back at the next step
// boundary (task_released), nothing waits for a lease to expire, and Run
// returns nil.
func TestRunStopsGracefullyWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		logs := newStopLogged()
		b := setup(t, sdk.WorkerConfig{Logger: slog.New(logs)})
		blocked, release := newSignal(), make(chan struct{})
		wf := sdk.NewWorkflow("reply.draft", 1, func(ctx workflow.Context, in string) (string, error) {
			draft, err := workflow.Step(ctx, "draft", func(context.Context) (string, error) {
				blocked.fire()
				<-release // not the step's context: a graceful stop lets it finish
				return "draft:" + in, nil
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "send", func(context.Context) (string, error) { return "sent:" + draft, nil }, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := runInBackground(ctx, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "hi", nil)
		require.NoError(t, err)
		receive(t, blocked.ch, "the step to start")

		cancel() // SIGTERM, through signal.NotifyContext
		receive(t, logs.stopping.ch, "the graceful stop to begin")
		close(release)
		require.NoError(t, receive(t, ran, "Run to return"))
		require.NoError(t, b.worker.Stop(context.Background()), "a second stop is a no-op")

		requireStoppedGracefully(t, b.client, res.ID, "draft")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// requireStoppedGracefully checks the history of a task whose worker was
// stopped while its first step ran: the step was recorded, and the task
// released at the next boundary (pending again) — or, when the step
// finished just before the worker began stopping, completed; never left to
// its lease's expiry.
func requireStoppedGracefully(t *testing.T, c *sdk.Client, id uuid.UUID, step string) {
	t.Helper()
	events := taskHistory(t, c, id)
	types := eventTypes(events)
	require.NotContains(t, types, history.LeaseExpired)
	require.GreaterOrEqual(t, len(types), 4, "the attempt did not end: %v", types)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted}, types[:3])
	require.Equal(t, step, eventsOf[history.StepCompletedData](events)[0].Name)
	info, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	if types[3] == history.TaskReleased {
		require.Len(t, types, 4, "nothing after the release")
		require.Equal(t, history.StatusPending, info.Status, "due again at once")
		return
	}
	require.Equal(t, history.StatusCompleted, info.Status, "neither released nor completed: %v", types)
}

// A step that outlives StopTimeout is cancelled, not recorded, and its task
// released; Run says the stop timed out.
func TestRunCancelsStepsThatOutliveStopTimeout(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{StopTimeout: 50 * time.Millisecond})
		blocked := newSignal()
		wf := sdk.NewWorkflow("llm.think", 1, func(ctx workflow.Context, in string) (string, error) {
			return workflow.Step(ctx, "think", func(ctx context.Context) (string, error) {
				blocked.fire()
				<-ctx.Done() // only the stop's timeout ends it
				return "", ctx.Err()
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := runInBackground(ctx, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "q", nil)
		require.NoError(t, err)
		receive(t, blocked.ch, "the step to start")

		cancel()
		err = receive(t, ran, "Run to return")
		require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
		require.ErrorContains(t, err, "StopTimeout")

		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased},
			eventTypes(taskHistory(t, b.client, res.ID)), "the cancelled step is not recorded; the task is released")
		info, err := b.client.Get(context.Background(), res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A stop begun without a deadline (a health check's Stop, say) is still
// bounded by StopTimeout once Start's context ends while it runs: SIGTERM
// after it must not leave the process waiting on a hung step.
func TestStopTimeoutBoundsAStopBegunBeforeTheContextEnded(t *testing.T) {
	t.Parallel()
	logs := newStopLogged()
	b := setupEmbedded(t, sdk.WorkerConfig{StopTimeout: 50 * time.Millisecond, Logger: slog.New(logs)})
	blocked := newSignal()
	wf := sdk.NewWorkflow("llm.hang", 1, func(ctx workflow.Context, in string) (string, error) {
		return workflow.Step(ctx, "hang", func(ctx context.Context) (string, error) {
			blocked.fire()
			<-ctx.Done() // only a cancelled stop ends it
			return "", ctx.Err()
		}, nil)
	}, nil)
	sdk.Register(b.worker, wf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := runInBackground(ctx, b.worker)
	res, err := sdk.Start(context.Background(), b.client, wf, "q", nil)
	require.NoError(t, err)
	receive(t, blocked.ch, "the step to start")

	stopped := make(chan error, 1)
	go func() { stopped <- b.worker.Stop(context.Background()) }()
	receive(t, logs.stopping.ch, "the stop to begin")
	cancel() // SIGTERM, after the stop began
	err = receive(t, stopped, "Stop to return within StopTimeout of the cancel")
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	err = receive(t, ran, "Run to return")
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased},
		eventTypes(taskHistory(t, b.client, res.ID)))
}

// A negative StopTimeout is refused when the worker is made.
func TestNegativeStopTimeoutRefused(t *testing.T) {
	t.Parallel()
	b := setupEmbedded(t, sdk.WorkerConfig{})
	_, err := sdk.NewWorker(sdk.WorkerConfig{Store: b.store, StopTimeout: -time.Second})
	require.ErrorContains(t, err, "StopTimeout -1s is negative")
}

// A Stop call ends Run, as http.Server's Shutdown ends ListenAndServe.
func TestStopEndsRun(t *testing.T) {
	t.Parallel()
	b := setupEmbedded(t, sdk.WorkerConfig{})
	sdk.Register(b.worker, sdk.NewWorkflow("noop", 1, func(workflow.Context, string) (string, error) { return "", nil }, nil))
	ran := runInBackground(context.Background(), b.worker)
	// Start registers the types while it holds the worker, so a Stop after
	// that finds the worker started.
	require.Eventually(t, func() bool {
		types, err := b.client.TaskTypes(context.Background())
		return err == nil && len(types) == 1
	}, testTimeout, 5*time.Millisecond)
	require.NoError(t, b.worker.Stop(context.Background()))
	require.NoError(t, receive(t, ran, "Run to return after Stop"))
}
