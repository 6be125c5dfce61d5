package sdk_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// manyWaiters is how many tasks TestManyWaitingTasksFinishWithFewWorkerSlots
// has wait on a signal at once, against manySlots worker slots.
const (
	manyWaiters = 10_000
	manySlots   = 10
)

// manyTimeout bounds each phase of the test with many waiters: a deadline
// against hangs, not a speed assertion (their speed is a benchmark's to
// measure).
const manyTimeout = 5 * time.Minute

// Tasks waiting in a receive hold no worker slot: ten thousand of them wait
// at once behind a worker of ten slots, and all finish once their signals
// are sent, each with its own signal's payload.
//
// It is not parallel with the other tests: its load would eat into their
// deadlines (testTimeout). Its two stores run in parallel with each other.
func TestManyWaitingTasksFinishWithFewWorkerSlots(t *testing.T) {
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		const queue = "signal.many"
		b := setup(t, sdk.WorkerConfig{Concurrency: manySlots, Queues: []string{queue}})
		// runs and received count the workflow's runs and its receives
		// that returned: cheap progress to poll, where the store's counts
		// are scans of every task (slow on SQLite under -race, and in the
		// way of the worker's claims). The store confirms what they say.
		var runs, received atomic.Int64
		wf := sdk.NewWorkflow("signal.many", 1, func(ctx workflow.Context, i int) (string, error) {
			runs.Add(1)
			v, ok, err := workflow.Receive[string](ctx, "go", 24*time.Hour)
			if err != nil {
				return "", err
			}
			received.Add(1)
			if !ok {
				return "timed out", nil // the output check fails it
			}
			return strconv.Itoa(i) + ":" + v, nil
		}, &sdk.WorkflowOpts{Queue: queue})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		// A waiting task is pending (its run time the wait's deadline), so
		// it counts against a bounded queue's MaxWaiting: the queue must
		// admit every waiter at once. It is bounded at exactly that here.
		require.NoError(t, b.client.SetQueue(ctx, queue, sdk.QueueSettings{MaxWaiting: manyWaiters}))

		began := time.Now()
		ids := make([]uuid.UUID, 0, manyWaiters)
		const batch = 1000
		for start := 0; start < manyWaiters; start += batch {
			starts := make([]sdk.StartParams, 0, batch)
			for i := start; i < min(start+batch, manyWaiters); i++ {
				starts = append(starts, sdk.StartEntry(wf, i, nil))
			}
			res, err := b.client.StartMany(ctx, starts)
			require.NoError(t, err)
			for _, r := range res {
				ids = append(ids, r.ID)
			}
		}
		started := time.Now()
		startWorker(t, b.worker)

		// Every task reaches its receive and waits there, while the worker
		// has only manySlots slots: none of the waiting tasks holds one.
		waitCount(t, &runs, manyWaiters, "runs of the workflow")
		waitQueue(t, b.client, queue, func(q store.QueueInfo, due int) bool {
			return q.Waiting == manyWaiters && q.Running == 0 && due == 0
		})
		requireEachTask(t, sdk.ClientStore(b.client), ids, func(task *store.Task, events []history.Event) {
			require.Equal(t, history.StatusPending, task.Status, "task %s", task.ID)
			require.NotEmpty(t, events)
			require.Equal(t, history.WaitStarted, events[len(events)-1].Type(), "task %s waits in its receive", task.ID)
		})
		waiting := time.Now()

		signalAll(t, b.client, ids, "go", func(i int) string { return "sig-" + strconv.Itoa(i) })
		signalled := time.Now()

		waitCount(t, &received, manyWaiters, "receives that returned")
		waitQueue(t, b.client, queue, func(q store.QueueInfo, _ int) bool {
			return q.Waiting == 0 && q.Running == 0
		})
		finished := time.Now()
		requireEachTask(t, sdk.ClientStore(b.client), ids, func(task *store.Task, events []history.Event) {
			require.Equal(t, history.StatusCompleted, task.Status, "task %s: last error %+v", task.ID, task.LastError)
			var in int
			require.NoError(t, json.Unmarshal(task.Input, &in))
			var out string
			require.NoError(t, json.Unmarshal(task.Output, &out))
			require.Equal(t, strconv.Itoa(in)+":sig-"+strconv.Itoa(in), out, "task %s took its own signal", task.ID)
			require.Equal(t, []history.Type{
				history.TaskScheduled, history.AttemptStarted, history.WaitStarted,
				history.SignalReceived, history.AttemptStarted, history.TaskCompleted,
			}, eventTypes(events), "task %s", task.ID)
		})
		stopWorker(t, b.worker)
		require.Equal(t, manyWaiters, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
		t.Logf("%d waiting tasks, %d slots: started in %v, all waiting after %v more, signalled in %v, finished %v after the last signal; %v in all",
			manyWaiters, manySlots, started.Sub(began).Round(time.Millisecond), waiting.Sub(started).Round(time.Millisecond),
			signalled.Sub(waiting).Round(time.Millisecond), finished.Sub(signalled).Round(time.Millisecond),
			time.Since(began).Round(time.Millisecond))
	})
}

// signalAll sends each task of ids the signal name carrying payload(i),
// from several goroutines at once, as many senders would. Each sends its
// share in chunks, a chunk in one statement: it reads the chunk's
// histories and appends a signal_received to each (what Client.Signal
// does for one task, with three round trips; its path is the other signal
// tests', its latency BenchmarkSignalToWorkflowResumed's). A task whose
// history moved on meanwhile (a conflict) is sent its signal with
// Client.Signal.
func signalAll(t *testing.T, c *sdk.Client, ids []uuid.UUID, name string, payload func(i int) string) {
	t.Helper()
	const senders, chunk = 4, 250
	s := sdk.ClientStore(c)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				for {
					start := int(next.Add(chunk)) - chunk
					if start >= len(ids) {
						return nil
					}
					part := ids[start:min(start+chunk, len(ids))]
					events, err := s.EventList(ctx, store.EventListAll("", part...))
					if err != nil {
						return err
					}
					params := make([]*store.EventAppendParams, len(part))
					for j, id := range part {
						state, err := history.Replay(events[id])
						if err != nil {
							return err
						}
						raw, err := json.Marshal(payload(start + j))
						if err != nil {
							return err
						}
						params[j] = &store.EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{
							history.SignalReceivedData{Name: name, Payload: raw, Sender: "signalAll"},
						}}
					}
					res, err := s.EventAppendMany(ctx, params)
					if err != nil {
						return err
					}
					for j, r := range res {
						if errors.Is(r.Err, store.ErrConflict) {
							_, r.Err = c.Signal(ctx, part[j], name, payload(start+j), nil)
						}
						if r.Err != nil {
							return r.Err
						}
					}
				}
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// waitCount polls n until it is at least want.
func waitCount(t *testing.T, n *atomic.Int64, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(manyTimeout)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s after %v, want %d", n.Load(), what, manyTimeout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitQueue polls the queue's load until done holds for it and the count
// of its due tasks.
func waitQueue(t *testing.T, c *sdk.Client, queue string, done func(q store.QueueInfo, due int) bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(manyTimeout)
	for {
		queues, err := c.Queues(ctx)
		require.NoError(t, err)
		var info store.QueueInfo
		for _, q := range queues {
			if q.Name == queue {
				info = q
			}
		}
		waits, err := c.QueueWaits(ctx)
		require.NoError(t, err)
		due := 0
		for _, w := range waits {
			if w.Queue == queue {
				due += w.Waiting
			}
		}
		if done(info, due) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d waiting (%d due), %d running after %v", queue, info.Waiting, due, info.Running, manyTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// requireEachTask reads the tasks and their histories in chunks and calls
// check with each.
func requireEachTask(t *testing.T, s store.Store, ids []uuid.UUID, check func(*store.Task, []history.Event)) {
	t.Helper()
	ctx := context.Background()
	const chunk = 500
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: part})
		require.NoError(t, err)
		require.Len(t, tasks, len(part))
		events, err := s.EventList(ctx, store.EventListAll("", part...))
		require.NoError(t, err)
		for _, task := range tasks {
			check(task, events[task.ID])
		}
	}
}
