package sdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk"
)

// testTimeout bounds every wait in these tests. It is a deadline against
// hangs, not a speed assertion.
const testTimeout = 30 * time.Second

// fastRetry retries at once, so tests that exhaust attempts finish quickly.
func fastRetry(maxAttempts int) *activities.RetryPolicy {
	return &activities.RetryPolicy{
		MaxAttempts: maxAttempts, InitialInterval: time.Millisecond, Multiplier: 2, MaxInterval: 5 * time.Millisecond,
	}
}

// newWorker returns another worker on the bundle's schema, for tests that
// need workers with different registrations.
func (b *testBundle) newWorker(t *testing.T, cfg sdk.WorkerConfig) *sdk.Worker {
	t.Helper()
	if b.store != nil {
		cfg.Store = b.store
	} else {
		cfg.Pool, cfg.Schema = b.pool, b.schema
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	w, err := sdk.NewWorker(cfg)
	require.NoError(t, err)
	return w
}

// startWorker starts w and makes sure it is stopped when the test ends,
// cancelling whatever still runs then (a test that failed half-way).
func startWorker(t *testing.T, w *sdk.Worker) {
	t.Helper()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := w.StopAndCancel(ctx); err != nil {
			t.Errorf("stop worker %s: %v", w.WorkerID(), err)
		}
	})
}

// stopWorker stops w gracefully, failing the test if it takes longer than
// testTimeout.
func stopWorker(t *testing.T, w *sdk.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}

// newClient is a client of cfg, closed when the test ends.
func newClient(t *testing.T, cfg sdk.ClientConfig) *sdk.Client {
	t.Helper()
	c, err := sdk.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// waitTask waits until the task is finished and returns it.
func waitTask(t *testing.T, c *sdk.Client, id uuid.UUID) *sdk.TaskInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	info, err := c.Wait(ctx, id)
	require.NoError(t, err, "wait for task %s", id)
	require.True(t, info.Status.Terminal())
	return info
}

func taskHistory(t *testing.T, c *sdk.Client, id uuid.UUID) []history.Event {
	t.Helper()
	events, err := c.History(context.Background(), id)
	require.NoError(t, err)
	return events
}

func eventTypes(events []history.Event) []history.Type {
	types := make([]history.Type, len(events))
	for i, e := range events {
		types[i] = e.Type()
	}
	return types
}

// eventsOf returns the payloads of type P in events, in order.
func eventsOf[P history.Payload](events []history.Event) []P {
	var out []P
	for _, e := range events {
		if p, ok := e.Data.(P); ok {
			out = append(out, p)
		}
	}
	return out
}

// signalOnDone is a context whose Done method reports its first call.
// Worker.Stop consults its context only after it has told running attempts
// to stop (closed Attempt.Stopping) and stopped claiming, so the first Done
// call tells a test, without sleeping, that a graceful stop is under way.
type signalOnDone struct {
	context.Context
	once   sync.Once
	called chan struct{}
}

func newSignalOnDone(ctx context.Context) *signalOnDone {
	return &signalOnDone{Context: ctx, called: make(chan struct{})}
}

func (c *signalOnDone) Done() <-chan struct{} {
	c.once.Do(func() { close(c.called) })
	return c.Context.Done()
}

// stopWhileStepBlocked stops w gracefully while one of its steps is blocked:
// once blocked has fired it starts w.Stop, waits until the stop is under way,
// then closes release so the step finishes, and waits for Stop to return.
func stopWhileStepBlocked(t *testing.T, w *sdk.Worker, blocked <-chan struct{}, release chan<- struct{}) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	select {
	case <-blocked:
	case <-deadline.C:
		t.Fatal("step never started")
	}
	base, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stopCtx := newSignalOnDone(base)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(stopCtx) }()
	select {
	case <-stopCtx.called:
	case err := <-stopped:
		t.Fatalf("Stop returned while a step was still blocked: %v", err)
	case <-deadline.C:
		t.Fatal("Stop never began waiting for running attempts")
	}
	close(release)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-deadline.C:
		t.Fatal("Stop did not return after the step finished")
	}
}

// signal is a channel closed once, however often fire is called.
type signal struct {
	once sync.Once
	ch   chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) fire() { s.once.Do(func() { close(s.ch) }) }

func eventTypesOf(t *testing.T, c *sdk.Client, id uuid.UUID) []history.Type {
	t.Helper()
	events, err := c.History(context.Background(), id)
	require.NoError(t, err)
	out := make([]history.Type, len(events))
	for i, e := range events {
		out[i] = e.Type()
	}
	return out
}

// putPlainBlob writes data as a blob of task id of namespace straight into
// the store, as a process without a payload stage would have (before its
// namespace was encrypted), and returns its reference.
func putPlainBlob(t *testing.T, st store.Store, namespace string, id uuid.UUID, contentType string, data []byte) sdk.Blob {
	t.Helper()
	ref, b, err := payload.NewBlob(namespace, id, contentType, data)
	require.NoError(t, err)
	require.NoError(t, st.BlobPut(context.Background(), &store.BlobPutParams{Namespace: b.Namespace, Key: b.Key, TaskID: b.TaskID,
		ContentType: b.ContentType, SHA256: b.SHA256, Data: b.Data}))
	return ref
}

// logStuckWorkflow logs, for a workflow that did not finish in time, its
// status and history and the status of each child it started: what a
// hang left behind, so a failure says where the run stopped.
func logStuckWorkflow(t *testing.T, c *sdk.Client, id uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Get(ctx, id)
	if err != nil {
		t.Logf("stuck workflow %s: read: %v", id, err)
		return
	}
	t.Logf("stuck workflow %s: status %s, attempt %d, run at %s", id, info.Status, info.Attempt, info.RunAt.Format(time.RFC3339Nano))
	events, err := c.History(ctx, id)
	if err != nil {
		t.Logf("stuck workflow %s: history: %v", id, err)
		return
	}
	for _, e := range events {
		t.Logf("  seq %d attempt %d %s at %s", e.Seq, e.Attempt, e.Type(), e.At.Format(time.RFC3339Nano))
		if cs, ok := e.Data.(history.ChildStartedData); ok {
			childID, err := uuid.Parse(cs.ChildID)
			if err != nil {
				continue
			}
			if child, err := c.Get(ctx, childID); err == nil {
				t.Logf("    child %d %s: status %s, attempt %d, run at %s", cs.Position, childID, child.Status, child.Attempt, child.RunAt.Format(time.RFC3339Nano))
			}
		}
	}
}
