package storetest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// What the processor-level tests and benchmarks run: an processor.Processor
// (with a notifier, as a worker has) over the store under test, and
// handlers that sleep, wait on a timer or fail once, written with the
// engine's payloads alone (no SDK).

// handlerFunc adapts a function to [processor.Handler].
type handlerFunc func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error)

func (f handlerFunc) HandleAttempt(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
	return f(ctx, a)
}

// workerOpts are what a test worker differs in.
type workerOpts struct {
	Queues         []string // default ["default"]
	Types          []store.TypeKey
	Concurrency    int
	PollInterval   time.Duration
	StrictPriority bool
	NoNotifier     bool // rely on the processor's own wake-ups alone
}

// runWorker starts a processor over s until the test ends (stopped then,
// its notifier too) and returns it.
func runWorker(tb testing.TB, s store.Store, h processor.Handler, o workerOpts) *processor.Processor {
	tb.Helper()
	if len(o.Types) == 0 {
		o.Types = []store.TypeKey{defaultKey}
	}
	var n *notifier.Notifier
	if !o.NoNotifier {
		n = notifier.New(s, notifier.Opts{Logger: quietLogger()})
		require.NoError(tb, n.Start(context.Background()))
		waitListening(tb, n)
	}
	p, err := processor.New(processor.Config{
		Store: s, Notifier: n, Queues: o.Queues, Types: o.Types, Handler: h,
		Concurrency: o.Concurrency, PollInterval: o.PollInterval, Logger: quietLogger(),
	})
	require.NoError(tb, err)
	require.NoError(tb, p.Start(context.Background()))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = p.StopAndCancel(ctx)
		if n != nil {
			n.Stop()
		}
	})
	return p
}

// waitListening waits until n's listener is connected, so a notification
// sent from now on reaches its subscribers.
func waitListening(tb testing.TB, n *notifier.Notifier) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !n.Listening() {
		if time.Now().After(deadline) {
			tb.Fatalf("the notifier is not listening after %s", waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// waitDone waits until done is closed, failing after waitTimeout: the
// deadline bounds a hang, it does not assert a speed.
func waitDone(tb testing.TB, done <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		tb.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
}

// countdown closes done once Done has been called n times.
type countdown struct {
	mu   sync.Mutex
	left int
	done chan struct{}
}

func newCountdown(n int) *countdown { return &countdown{left: n, done: make(chan struct{})} }

func (c *countdown) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left--
	if c.left == 0 {
		close(c.done)
	}
}

// busyHandler runs each attempt for d and completes it; running counts
// the attempts running at once, and the most seen.
type busyHandler struct {
	d        time.Duration
	finished *countdown

	mu            sync.Mutex
	running, peak int
}

func (h *busyHandler) HandleAttempt(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
	h.mu.Lock()
	h.running++
	h.peak = max(h.peak, h.running)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
	}()
	select {
	case <-time.After(h.d):
	case <-ctx.Done():
		return nil, processor.ErrReleased
	}
	h.finished.Done()
	return []history.Payload{history.TaskCompletedData{}}, nil
}

// lateness records, for tasks that wait once (on a timer or a retry), how
// long after its due time each was running again.
type lateness struct {
	mu       sync.Mutex
	late     []time.Duration
	finished *countdown
}

func (l *lateness) record(d time.Duration) {
	l.mu.Lock()
	l.late = append(l.late, d)
	l.mu.Unlock()
	l.finished.Done()
}

// sleepOnce returns a handler whose first attempt sleeps on a durable timer
// for d (timer_started, as workflow.Sleep ends an attempt) and whose
// second, once the timer is due, fires it and completes, recording how late
// after the timer's fire time it began.
func sleepOnce(d time.Duration, l *lateness) processor.Handler {
	return handlerFunc(func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		state := a.State()
		if state.Timer == nil {
			return []history.Payload{history.TimerStartedData{Position: len(state.Steps), FireAt: time.Now().Add(d)}}, nil
		}
		l.record(time.Since(state.Timer.FireAt))
		return []history.Payload{history.TimerFiredData{Position: state.Timer.Position}, history.TaskCompletedData{}}, nil
	})
}

// failOnce returns a handler whose first attempt fails with a retry after
// backoff and whose second completes, recording how late after the retry's
// next run time it began.
func failOnce(backoff time.Duration, l *lateness) processor.Handler {
	return handlerFunc(func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		state := a.State()
		if state.Attempt == 1 {
			next := time.Now().Add(backoff)
			return []history.Payload{history.AttemptFailedData{
				Error:     history.ErrorInfo{Class: history.Transient, Message: "fails once"},
				NextRunAt: &next,
			}}, nil
		}
		l.record(time.Since(state.RunAt))
		return []history.Payload{history.TaskCompletedData{}}, nil
	})
}
