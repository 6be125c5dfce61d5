package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testHandler runs each attempt through fn.
type testHandler struct {
	fn func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error)
}

func (h *testHandler) HandleAttempt(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
	return h.fn(ctx, a)
}

// completeHandler completes every attempt at once.
func completeHandler() *testHandler {
	return &testHandler{fn: func(_ context.Context, a *processor.Attempt) ([]history.Payload, error) {
		return []history.Payload{history.TaskCompletedData{Output: json.RawMessage(fmt.Sprintf("%q", a.Task.ID))}}, nil
	}}
}

// newProcessor returns a processor of default test tasks over s, with
// short intervals; cfg's zero fields take those. It is stopped when the test
// ends, if the test did not stop it.
func newProcessor(t *testing.T, s *pgstore.Store, h processor.Handler, cfg processor.Config) *processor.Processor {
	t.Helper()
	cfg.Store, cfg.Handler = s, h
	if cfg.Types == nil {
		cfg.Types = []store.TypeKey{enginetest.TestKey}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = enginetest.Logger(t)
	}
	p, err := processor.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.WaitTimeout)
		defer cancel()
		_ = p.StopAndCancel(ctx)
	})
	return p
}

func stopProcessor(t *testing.T, p *processor.Processor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.WaitTimeout)
	defer cancel()
	require.NoError(t, p.Stop(ctx))
}

// recv waits for a value from ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(enginetest.WaitTimeout):
		t.Fatalf("timed out after %s waiting for %s", enginetest.WaitTimeout, what)
		panic("unreachable")
	}
}

func TestProcessorRunsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	ids := enginetest.StartTasks(t, s, 20, nil)
	other := enginetest.StartTask(t, s, &enginetest.TaskOpts{Type: "other"})

	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		// No require here: this is not the test's goroutine.
		if st := a.State(); st.Status != history.StatusRunning || st.Attempt != 1 {
			return nil, errors.Newf("attempt state %s, attempt %d", st.Status, st.Attempt)
		}
		if err := a.Append(ctx, history.StepCompletedData{Position: 0, Name: "fetch", Output: json.RawMessage(`1`)}); err != nil {
			return nil, err
		}
		if len(a.State().Steps) != 1 {
			return nil, errors.New("Append did not advance the attempt's state")
		}
		return []history.Payload{history.TaskCompletedData{Output: json.RawMessage(fmt.Sprintf("%q", a.Task.ID))}}, nil
	}}
	p := newProcessor(t, s, h, processor.Config{Concurrency: 4, WorkerID: "proc-1"})
	require.Equal(t, "proc-1", p.WorkerID())
	require.NoError(t, p.Start(ctx))
	require.Error(t, p.Start(ctx), "a second Start is refused")

	for _, id := range ids {
		task := enginetest.WaitStatus(t, s, id, history.StatusCompleted)
		require.JSONEq(t, fmt.Sprintf("%q", id), string(task.Output))
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.TaskCompleted},
			enginetest.EventTypes(t, s, id))
		started := enginetest.Events(t, s, id)[1].Data.(history.AttemptStartedData)
		require.Equal(t, "proc-1", started.WorkerID)
	}
	stopProcessor(t, p)
	require.NoError(t, p.Stop(ctx), "Stop is idempotent")
	require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, other).Status, "a type the processor does not run is left alone")
	require.Equal(t, 21, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorConcurrencyBound(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	const tasks, limit = 10, 3
	ids := enginetest.StartTasks(t, s, tasks, nil)
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	p := newProcessor(t, s, h, processor.Config{Concurrency: limit})
	require.NoError(t, p.Start(context.Background()))

	enginetest.WaitFor(t, "the processor to fill its slots", func() bool { return inflight.Load() == limit })
	running, err := s.TaskList(context.Background(), &store.TaskListParams{Namespace: store.DefaultNamespace, Status: history.StatusRunning})
	require.NoError(t, err)
	require.Len(t, running, limit, "claimed no more than it runs")
	for i := range tasks {
		recv(t, chanSend(release), fmt.Sprintf("attempt %d to take a release", i))
	}
	for _, id := range ids {
		enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	}
	stopProcessor(t, p)
	require.Equal(t, int32(limit), peak.Load(), "at most Concurrency attempts at once, and that many used")
	require.Equal(t, tasks, enginetest.RequireProjectionsMatch(t, s))
}

// chanSend sends on ch in the background and reports when the send is taken.
// The sender gives up when the test ends.
func chanSend(ch chan<- struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		select {
		case ch <- struct{}{}:
			close(done)
		case <-time.After(enginetest.WaitTimeout):
		}
	}()
	return done
}

func TestProcessorGracefulStopReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})

	entered := make(chan struct{})
	h1 := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		close(entered)
		select {
		case <-a.Stopping():
			return nil, processor.ErrReleased
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	// A lease far longer than the test: only a release lets another worker
	// take the task.
	p1 := newProcessor(t, s, h1, processor.Config{LeaseTTL: time.Hour, WorkerID: "p1"})
	require.NoError(t, p1.Start(ctx))
	recv(t, entered, "the first attempt to start")
	stopProcessor(t, p1)

	task := enginetest.GetTask(t, s, id)
	require.Equal(t, history.StatusPending, task.Status)
	require.Empty(t, task.LeaseOwner)
	require.Nil(t, task.LeaseExpiresAt)
	evs := enginetest.Events(t, s, id)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased}, enginetest.EventTypes(t, s, id))
	released := evs[2].Data.(history.TaskReleasedData)
	require.Equal(t, "p1", released.WorkerID)
	require.Positive(t, released.LeaseEpoch)

	p2 := newProcessor(t, s, completeHandler(), processor.Config{LeaseTTL: time.Hour, WorkerID: "p2"})
	require.NoError(t, p2.Start(ctx))
	task = enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	require.Equal(t, 2, task.Attempt)
	require.Greater(t, task.LeaseEpoch, released.LeaseEpoch, "the second claim's epoch is greater")
	stopProcessor(t, p2)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorStopAndCancelReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, nil)
	entered := make(chan struct{})
	causes := make(chan error, 1)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		close(entered)
		<-ctx.Done() // ignores Stopping: only the cancellation ends it
		causes <- context.Cause(ctx)
		return nil, processor.ErrReleased
	}}
	p := newProcessor(t, s, h, processor.Config{LeaseTTL: time.Hour})
	require.NoError(t, p.Start(ctx))
	recv(t, entered, "the attempt to start")
	stopCtx, cancel := context.WithTimeout(ctx, enginetest.WaitTimeout)
	defer cancel()
	require.NoError(t, p.StopAndCancel(stopCtx))
	require.True(t, errors.Is(recv(t, causes, "the attempt's end"), service.ErrStopped))
	require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, id).Status)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased}, enginetest.EventTypes(t, s, id))
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorStopDeadlineCancelsAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, nil)
	entered := make(chan struct{})
	causes := make(chan error, 1)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		close(entered)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, processor.ErrReleased
	}}
	p := newProcessor(t, s, h, processor.Config{LeaseTTL: time.Hour})
	require.NoError(t, p.Start(ctx))
	recv(t, entered, "the attempt to start")
	// A graceful stop whose deadline has already passed: the attempt that
	// ignores Stopping is cancelled and still gets to release its task.
	expired, cancel := context.WithCancel(ctx)
	cancel()
	err := p.Stop(expired)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	require.True(t, errors.Is(recv(t, causes, "the attempt's end"), service.ErrStopped))
	require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, id).Status)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorCrashAppendsNothing(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	entered := make(chan struct{})
	returned := make(chan struct{})
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		defer close(returned)
		close(entered)
		<-ctx.Done()
		// A step that "finished" as the process died, and an outcome: a
		// crashed worker writes neither.
		_ = a.Append(a.DurableContext(), history.StepCompletedData{Position: 0, Name: "late"})
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	p := newProcessor(t, s, h, processor.Config{LeaseTTL: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	ctx, crash := context.WithCancel(context.Background())
	require.NoError(t, p.Start(ctx))
	recv(t, entered, "the attempt to start")
	crash()
	recv(t, returned, "the handler to return")
	stopProcessor(t, p) // waits for the executor to finish with the outcome

	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted}, enginetest.EventTypes(t, s, id))
	require.Equal(t, history.StatusRunning, enginetest.GetTask(t, s, id).Status)

	// Nobody renews the lease now: the rescuer reschedules the task and
	// another worker finishes it.
	enginetest.RescueOne(t, s)
	require.Equal(t, history.StatusRetrying, enginetest.GetTask(t, s, id).Status)
	p2 := newProcessor(t, s, completeHandler(), processor.Config{})
	require.NoError(t, p2.Start(context.Background()))
	task := enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	require.Equal(t, 2, task.Attempt)
	stopProcessor(t, p2)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired,
		history.AttemptStarted, history.TaskCompleted}, enginetest.EventTypes(t, s, id))
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

// expireAndRescue takes task id's lease away from a worker that keeps
// renewing it: it backdates the lease (lease_expires_at is outside the log,
// so the projection invariant is untouched) and rescues it, retrying if a
// heartbeat renewed the lease in between.
func expireAndRescue(t *testing.T, s *pgstore.Store, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	enginetest.WaitFor(t, "the lease of "+id.String()+" to be taken away", func() bool {
		_, err := s.Pool().Exec(ctx, "UPDATE "+enginetest.TableName(s, "tasks")+" SET lease_expires_at = now() - interval '1 minute' WHERE id = $1 AND status = 'running'", id)
		require.NoError(t, err)
		n, err := maintenance.RescueExpired(ctx, s, 100)
		require.NoError(t, err)
		return n == 1
	})
}

func TestProcessorLeaseLostCancelsAttempt(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 5})
	entered := make(chan struct{})
	causes := make(chan error, 1)
	stolen := make(chan struct{})
	appendErrs := make(chan error, 1)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		close(entered)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-stolen
		// The stale worker still tries to record a step, then an outcome.
		appendErrs <- a.Append(a.DurableContext(), history.StepCompletedData{Position: 0, Name: "late"})
		return []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`"stale"`)}}, nil
	}}
	// One slot, held by the stale attempt until the test lets it go: the
	// processor cannot claim the rescued task back before the thief does.
	p := newProcessor(t, s, h, processor.Config{
		Concurrency: 1, LeaseTTL: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond, WorkerID: "stale",
	})
	require.NoError(t, p.Start(context.Background()))
	recv(t, entered, "the attempt to start")

	// The heartbeat keeps the lease alive.
	staleEpoch := enginetest.GetTask(t, s, id).LeaseEpoch
	first := enginetest.GetTask(t, s, id).LeaseExpiresAt
	enginetest.WaitFor(t, "a heartbeat to extend the lease", func() bool {
		return enginetest.GetTask(t, s, id).LeaseExpiresAt.After(*first)
	})

	expireAndRescue(t, s, id)
	thief := enginetest.ClaimOne(t, s, "thief", time.Hour)
	require.Equal(t, id, thief.Task.ID)
	require.Greater(t, thief.Task.LeaseEpoch, staleEpoch, "a new epoch for the new claim")

	close(stolen)
	cause := recv(t, causes, "the heartbeat to cancel the attempt")
	require.True(t, errors.Is(cause, processor.ErrLeaseLost), "cause %v", cause)
	err := recv(t, appendErrs, "the stale append")
	require.True(t, errors.Is(err, store.ErrFenced), "got %v", err)
	stopProcessor(t, p)

	task := enginetest.GetTask(t, s, id)
	require.Equal(t, history.StatusRunning, task.Status)
	require.Equal(t, "thief", task.LeaseOwner)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired, history.AttemptStarted},
		enginetest.EventTypes(t, s, id), "the stale outcome was fenced off")
	enginetest.Complete(t, s, thief)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorSurvivesHandlerPanic(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3})
	var calls atomic.Int32
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		if calls.Add(1) == 1 {
			panic("handler bug")
		}
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	p := newProcessor(t, s, h, processor.Config{LeaseTTL: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, p.Start(context.Background()))
	enginetest.WaitFor(t, "the first attempt", func() bool { return calls.Load() >= 1 })
	// The panicking attempt is abandoned like a crash: its lease runs out
	// and the same processor, still running, takes the task again.
	enginetest.RescueOne(t, s)
	task := enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	require.Equal(t, 2, task.Attempt)
	require.Equal(t, int32(2), calls.Load())
	stopProcessor(t, p)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired,
		history.AttemptStarted, history.TaskCompleted}, enginetest.EventTypes(t, s, id))
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorRetryAndFailure(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	retry := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3, Input: json.RawMessage(`"retry"`)})
	fail := enginetest.StartTask(t, s, &enginetest.TaskOpts{MaxAttempts: 3, Input: json.RawMessage(`"fail"`)})
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		info := history.ErrorInfo{Class: history.Transient, Message: "flaky"}
		switch {
		case string(a.Task.Input) == `"fail"`:
			info.Class = history.Permanent
			return []history.Payload{history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info}}, nil
		case a.State().Attempt < 3:
			next := time.Now() // due again at once
			return []history.Payload{history.AttemptFailedData{Error: info, NextRunAt: &next}}, nil
		}
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	p := newProcessor(t, s, h, processor.Config{})
	require.NoError(t, p.Start(context.Background()))
	task := enginetest.WaitStatus(t, s, retry, history.StatusCompleted)
	require.Equal(t, 3, task.Attempt)
	require.NotNil(t, task.LastError, "the last failure is kept")
	task = enginetest.WaitStatus(t, s, fail, history.StatusFailed)
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, history.Permanent, task.LastError.Class)
	stopProcessor(t, p)
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorWokenByNotifier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{Logger: enginetest.Logger(t)})
	require.NoError(t, n.Start(ctx))
	t.Cleanup(n.Stop)
	// Polling once an hour: only a notification brings the second task in
	// within the test.
	p := newProcessor(t, s, completeHandler(), processor.Config{Notifier: n, PollInterval: time.Hour})
	probe := enginetest.StartTask(t, s, nil)
	require.NoError(t, p.Start(ctx))
	enginetest.WaitStatus(t, s, probe, history.StatusCompleted)

	id := enginetest.StartTask(t, s, nil)
	enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	stopProcessor(t, p)
	n.Stop()
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}

func TestProcessorConfig(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	h := completeHandler()
	for name, cfg := range map[string]processor.Config{
		"no store":              {Handler: h, Types: []store.TypeKey{enginetest.TestKey}},
		"no handler":            {Store: s, Types: []store.TypeKey{enginetest.TestKey}},
		"no types":              {Store: s, Handler: h},
		"heartbeat not shorter": {Store: s, Handler: h, Types: []store.TypeKey{enginetest.TestKey}, LeaseTTL: time.Second, HeartbeatInterval: time.Second},
	} {
		_, err := processor.New(cfg)
		require.Error(t, err, name)
	}
	p, err := processor.New(processor.Config{Store: s, Handler: h, Types: []store.TypeKey{enginetest.TestKey}})
	require.NoError(t, err)
	require.NotEmpty(t, p.WorkerID())
	other, err := processor.New(processor.Config{Store: s, Handler: h, Types: []store.TypeKey{enginetest.TestKey}})
	require.NoError(t, err)
	require.NotEqual(t, p.WorkerID(), other.WorkerID(), "two workers in one process differ")
}

func TestProcessorStopBeforeStart(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	p := newProcessor(t, s, completeHandler(), processor.Config{})
	ctx := context.Background()
	require.NoError(t, p.Stop(ctx), "safe before Start")
	require.NoError(t, p.StopAndCancel(ctx))
	// A stopped processor would claim nothing and its heartbeat could
	// never be stopped: starting it must be refused.
	startCtx, cancel := context.WithCancel(ctx)
	defer cancel() // ends what a wrongly accepted Start left running
	require.Error(t, p.Start(startCtx), "Start after Stop must be refused")
}

// TestProcessorStopAndCancelStrandsNothing stops busy processors with
// StopAndCancel: every task they claimed must be released, none left
// running under a lease nobody holds (which would wait for it to expire).
// The handler releases at once, so the processor claims all the time and
// the stop often lands on a claim in flight.
func TestProcessorStopAndCancelStrandsNothing(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	enginetest.StartTasks(t, s, 20, nil)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		return nil, processor.ErrReleased
	}}
	for i := range 25 {
		p := newProcessor(t, s, h, processor.Config{Concurrency: 3, LeaseTTL: time.Hour})
		before := enginetest.CountRows(t, s, "events")
		require.NoError(t, p.Start(context.Background()))
		enginetest.WaitFor(t, "the processor to churn", func() bool { return enginetest.CountRows(t, s, "events") > before+20 })
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.WaitTimeout)
		require.NoError(t, p.StopAndCancel(ctx))
		cancel()
		running, err := s.TaskList(context.Background(), &store.TaskListParams{
			Namespace: store.DefaultNamespace, Status: history.StatusRunning, Limit: 100,
		})
		require.NoError(t, err)
		require.Empty(t, running, "round %d: tasks left running after StopAndCancel", i)
	}
	require.Equal(t, 20, enginetest.RequireProjectionsMatch(t, s))
}

// TestProcessorStartStopStress starts and stops processors over and over
// while tasks come in: every task ends completed exactly once, whatever
// point of its attempt a stop hit.
func TestProcessorStartStopStress(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	ids := enginetest.StartTasks(t, s, 40, nil)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		select {
		case <-a.Stopping():
			return nil, processor.ErrReleased
		default:
		}
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	for i := range 15 {
		p := newProcessor(t, s, h, processor.Config{Concurrency: 3, WorkerID: fmt.Sprintf("w%d", i)})
		require.NoError(t, p.Start(context.Background()))
		if i%2 == 0 {
			stopProcessor(t, p)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), enginetest.WaitTimeout)
			require.NoError(t, p.StopAndCancel(ctx))
			cancel()
		}
	}
	final := newProcessor(t, s, h, processor.Config{Concurrency: 5})
	require.NoError(t, final.Start(context.Background()))
	for _, id := range ids {
		enginetest.WaitStatus(t, s, id, history.StatusCompleted)
	}
	stopProcessor(t, final)
	for _, id := range ids {
		completed := 0
		for _, typ := range enginetest.EventTypes(t, s, id) {
			if typ == history.TaskCompleted {
				completed++
			}
		}
		require.Equal(t, 1, completed)
	}
	require.Equal(t, 40, enginetest.RequireProjectionsMatch(t, s))
}

// Work announced while every slot is busy is claimed as soon as a slot
// frees, not at the next poll.
func TestProcessorClaimsWorkThatArrivedWhileFullWhenASlotFrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{Logger: enginetest.Logger(t)})
	require.NoError(t, n.Start(ctx))
	defer n.Stop()

	started := make(chan uuid.UUID, 2)
	release := make(chan struct{})
	h := &testHandler{fn: func(_ context.Context, a *processor.Attempt) ([]history.Payload, error) {
		started <- a.Task.ID
		<-release
		return []history.Payload{history.TaskCompletedData{}}, nil
	}}
	// An hour between polls: only a notification or a freed slot can
	// trigger a claim in this test.
	p := newProcessor(t, s, h, processor.Config{Notifier: n, Concurrency: 1, PollInterval: time.Hour})
	require.NoError(t, p.Start(ctx))

	first := enginetest.StartTask(t, s, nil)
	require.Equal(t, first, recv(t, started, "the first task to start"))
	second := enginetest.StartTask(t, s, nil) // announced while the only slot is busy
	close(release)
	require.Equal(t, second, recv(t, started, "the second task to start once the slot frees"))
	stopProcessor(t, p)
	enginetest.RequireProjectionsMatch(t, s)
}

// A signal that reaches a run between its attempt's read and its continue
// as new stops the continue: the attempt is handed back, and the next one
// replays with the signal (and continues, here).
func TestContinueAsNewAfterASignalHandsTheAttemptBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, nil)
	results := make(chan error, 2)
	var nextID atomic.Value
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		st := a.State()
		if len(st.Signals) == 0 {
			// Sent after the attempt read the task, before it continues.
			_, err := requests.Signal(ctx, s, &store.TaskSignalParams{Namespace: a.Task.Namespace, TaskID: a.Task.ID, Name: "more", Sender: "test"})
			require.NoError(t, err)
		}
		sc := st.Scheduled
		next, err := a.ContinueAsNew(ctx, nil, store.TaskStartParams{Namespace: a.Task.Namespace, Scheduled: history.TaskScheduledData{
			TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, RunAt: time.Now(), MaxAttempts: sc.MaxAttempts,
			ContinuedFrom: a.Task.ID.String(),
		}})
		results <- err
		if errors.Is(err, processor.ErrSignalArrived) {
			return []history.Payload{history.TaskReleasedData{WorkerID: a.WorkerID(), LeaseEpoch: a.State().Lease.Epoch, Reason: "signalled"}}, nil
		}
		if err != nil {
			return nil, err
		}
		nextID.Store(next)
		return nil, processor.ErrEnded
	}}
	p := newProcessor(t, s, h, processor.Config{LeaseTTL: time.Hour, Types: []store.TypeKey{enginetest.TestKey}})
	require.NoError(t, p.Start(ctx))
	err := recv(t, results, "the first continue")
	require.True(t, errors.Is(err, processor.ErrSignalArrived), "got %v", err)
	require.NoError(t, recv(t, results, "the second continue"))
	stopProcessor(t, p)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.SignalReceived, history.TaskReleased,
		history.AttemptStarted, history.TaskContinued}, enginetest.EventTypes(t, s, id))
	require.NotNil(t, nextID.Load())
}

// conflictingStore refuses every append of a completion by the first
// attempt of task id, after a signal to the task moved its log on, as a
// stream of children's ends or signals would: the outcome's conflict
// stands through the appender's rebases. With quiet set it refuses without
// moving the log (a refusal of another kind).
type conflictingStore struct {
	store.Store
	id      uuid.UUID
	quiet   bool
	refused atomic.Int32
}

func (s *conflictingStore) EventAppendMany(ctx context.Context, params []*store.EventAppendParams) ([]store.AppendResult, error) {
	refuse := func(p *store.EventAppendParams) bool {
		if p.TaskID != s.id || p.Attempt != 1 {
			return false
		}
		for _, pl := range p.Payloads {
			if _, ok := pl.(history.TaskCompletedData); ok {
				return true
			}
		}
		return false
	}
	var pass []*store.EventAppendParams
	for _, p := range params {
		if !refuse(p) {
			pass = append(pass, p)
		}
	}
	var passed []store.AppendResult
	if len(pass) > 0 {
		var err error
		if passed, err = s.Store.EventAppendMany(ctx, pass); err != nil {
			return nil, err
		}
	}
	results := make([]store.AppendResult, len(params))
	for i, p := range params {
		if refuse(p) {
			if !s.quiet {
				if _, err := requests.Signal(ctx, s.Store, &store.TaskSignalParams{Namespace: store.DefaultNamespace, TaskID: s.id,
					Name: "poke", Sender: "test"}); err != nil {
					return nil, err
				}
			}
			s.refused.Add(1)
			results[i] = store.AppendResult{State: p.State, Err: errors.Mark(errors.Newf("append to task %s: the log moved on", p.TaskID), store.ErrConflict)}
			continue
		}
		results[i], passed = passed[0], passed[1:]
	}
	return results, nil
}

// An attempt whose outcome cannot be recorded (its log kept moving through
// every rebase) hands the task back at once instead of leaving it running
// until its lease expires (an hour here): the next attempt completes it,
// and the hand-back says why.
func TestProcessorHandsBackAnOutcomeThatConflicts(t *testing.T) {
	t.Parallel()
	pg := enginetest.Store(t)
	id := enginetest.StartTask(t, pg, nil)
	s := &conflictingStore{Store: pg, id: id}
	p, err := processor.New(processor.Config{Store: s, Handler: completeHandler(), Types: []store.TypeKey{enginetest.TestKey},
		PollInterval: 20 * time.Millisecond, LeaseTTL: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { stopProcessor(t, p) })

	task := enginetest.WaitStatus(t, pg, id, history.StatusCompleted)
	require.Equal(t, 2, task.Attempt)
	require.Greater(t, s.refused.Load(), int32(1), "the outcome was rebased before its conflict stood")
	events := enginetest.Events(t, pg, id)
	var released []history.TaskReleasedData
	for _, e := range events {
		if r, ok := e.Data.(history.TaskReleasedData); ok {
			released = append(released, r)
		}
	}
	require.Len(t, released, 1, "%v", enginetest.EventTypes(t, pg, id))
	require.Contains(t, released[0].Reason, "its outcome could not be recorded")
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, pg))
}

// A conflict with no events after the outcome's state (another kind of
// refusal) is not handed back: a hand-back would rerun the task at once
// without spending an attempt, again and again if the refusal recurs. It
// stays with the rescuer, as before.
func TestProcessorLeavesAConflictWithoutMovesToTheRescuer(t *testing.T) {
	t.Parallel()
	pg := enginetest.Store(t)
	id := enginetest.StartTask(t, pg, nil)
	s := &conflictingStore{Store: pg, id: id, quiet: true}
	p, err := processor.New(processor.Config{Store: s, Handler: completeHandler(), Types: []store.TypeKey{enginetest.TestKey},
		PollInterval: 20 * time.Millisecond, LeaseTTL: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	enginetest.WaitFor(t, "the outcome's conflict to stand", func() bool { return s.refused.Load() > 1 })
	stopProcessor(t, p) // waits for the outcome's callback and any hand-back
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted}, enginetest.EventTypes(t, pg, id),
		"nothing written after the refused outcome")
}
