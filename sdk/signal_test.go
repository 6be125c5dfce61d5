package sdk_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// received is what one workflow.Receive returned.
type received struct {
	Value string `json:"value"`
	OK    bool   `json:"ok"`
}

// receiveAll is a workflow that receives each of names in turn, each with
// its timeout, and returns what each returned.
func receiveAll(typ string, names []string, timeouts []time.Duration) *sdk.Workflow[struct{}, []received] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, _ struct{}) ([]received, error) {
		var out []received
		for i, name := range names {
			v, ok, err := workflow.Receive[string](ctx, name, timeouts[i])
			if err != nil {
				return nil, err
			}
			out = append(out, received{v, ok})
		}
		return out, nil
	}, nil)
}

// waitForEvent polls the task's history until it holds an event of typ.
func waitForEvent(t *testing.T, c *sdk.Client, id uuid.UUID, typ history.Type) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		for _, e := range taskHistory(t, c, id) {
			if e.Type() == typ {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s in task %s's history", typ, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func requireReceived(t *testing.T, info *sdk.TaskInfo, want []received) {
	t.Helper()
	require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
	var got []received
	require.NoError(t, json.Unmarshal(info.Output, &got))
	require.Equal(t, want, got)
}

func TestSignalSentBeforeTheReceiveIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.early", []string{"approval"}, []time.Duration{time.Hour})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		res, err := b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		startWorker(t, b.worker)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"yes", true}})
		require.NotContains(t, eventTypesOf(t, b.client, run.ID), history.WaitStarted, "nothing to wait for")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestSignalWakesAWaitingReceive(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.wait", []string{"approval"}, []time.Duration{time.Hour})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", &sdk.SignalOpts{Sender: "alice"})
		require.NoError(t, err)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"yes", true}})
		sigs := eventsOf[history.SignalReceivedData](taskHistory(t, b.client, run.ID))
		require.Len(t, sigs, 1)
		require.Equal(t, "alice", sigs[0].Sender)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestSignalAfterATimeoutStaysForTheNextReceive(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		timedOut, sent := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		wf := sdk.NewWorkflow("approve.late", 1, func(ctx workflow.Context, _ struct{}) ([]received, error) {
			first, ok1, err := workflow.Receive[string](ctx, "approval", 50*time.Millisecond)
			if err != nil {
				return nil, err
			}
			// The signal is sent while this step runs, after the timeout
			// is on record.
			if _, err := workflow.Step(ctx, "remind", func(context.Context) (bool, error) {
				if once.CompareAndSwap(false, true) {
					close(timedOut)
				}
				<-sent
				return true, nil
			}, nil); err != nil {
				return nil, err
			}
			second, ok2, err := workflow.Receive[string](ctx, "approval", time.Hour)
			if err != nil {
				return nil, err
			}
			return []received{{first, ok1}, {second, ok2}}, nil
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitSignal(t, timedOut, "the first receive to time out")
		waitForEvent(t, b.client, run.ID, history.WaitTimedOut)
		_, err = b.client.Signal(ctx, run.ID, "approval", "late", nil)
		require.NoError(t, err)
		close(sent)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"", false}, {"late", true}})
		types := eventTypesOf(t, b.client, run.ID)
		require.Less(t, indexOf(types, history.WaitTimedOut), indexOf(types, history.SignalReceived), "the signal came after the timeout")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A timeout is what the history records, not the clock: a signal that
// reaches the history after the wait's deadline has passed but before any
// attempt has recorded wait_timed_out is taken by the receive, which then
// does not time out.
func TestSignalAfterTheDeadlineButBeforeTheTimeoutIsTaken(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.race", []string{"approval"}, []time.Duration{2 * time.Second})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		require.NoError(t, b.worker.Start(ctx))
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		stopWorker(t, b.worker) // no worker sees the deadline pass
		waits := eventsOf[history.WaitStartedData](taskHistory(t, b.client, run.ID))
		require.Len(t, waits, 1)
		require.NotContains(t, eventTypesOf(t, b.client, run.ID), history.WaitTimedOut, "stopped before the deadline")
		time.Sleep(time.Until(waits[0].Deadline) + 100*time.Millisecond) // the deadline passes
		_, err = b.client.Signal(ctx, run.ID, "approval", "just in time", nil)
		require.NoError(t, err)
		other := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(other, wf)
		startWorker(t, other)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"just in time", true}})
		require.Equal(t, []history.Type{
			history.TaskScheduled, history.AttemptStarted, history.WaitStarted,
			history.SignalReceived, history.AttemptStarted, history.TaskCompleted,
		}, eventTypesOf(t, b.client, run.ID))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// aheadClock is the wall clock moved ahead by d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time { return time.Now().Add(c.d) }

// A signal written while an attempt decides that its receive has timed out
// is taken: the attempt's wait_timed_out cannot follow it, so that append
// fails, and the next attempt's receive takes the signal. The store's clock
// runs ahead of the worker's (within the skew a receive waits out), so the
// attempt woken at the deadline by the store's clock holds the task while
// its own clock catches up, after reading no signal: the signal is sent
// then. On SQLite only: the store's clock is the test's to set there
// (PostgreSQL's is the server's).
func TestSignalWhileItsReceiveTimesOutIsTaken(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.New(context.Background(), sqlitestore.Config{
		Path: filepath.Join(t.TempDir(), "cairn.db"), Clock: aheadClock{4 * time.Second}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, PollInterval: 50 * time.Millisecond,
		LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	// The deadline is 4.5 s away by the worker's clock, half a second by
	// the store's: the task is due again then, and its receive waits out
	// the other 4 s (under the receive's 5 s bound on skew).
	wf := receiveAll("approve.skew", []string{"approval"}, []time.Duration{4500 * time.Millisecond})
	sdk.Register(worker, wf)
	ctx := context.Background()
	run, err := sdk.Start(ctx, client, wf, struct{}{}, nil)
	require.NoError(t, err)
	startWorker(t, worker)
	deciding := []history.Type{history.TaskScheduled, history.AttemptStarted, history.WaitStarted, history.AttemptStarted}
	deadline := time.Now().Add(testTimeout)
	for !slices.Equal(deciding, eventTypesOf(t, client, run.ID)) {
		require.True(t, time.Now().Before(deadline), "no attempt woke at the deadline: %v", eventTypesOf(t, client, run.ID))
		time.Sleep(10 * time.Millisecond)
	}
	_, err = client.Signal(ctx, run.ID, "approval", "in the nick of time", nil)
	require.NoError(t, err)
	requireReceived(t, waitTask(t, client, run.ID), []received{{"in the nick of time", true}})
	types := eventTypesOf(t, client, run.ID)
	require.NotContains(t, types, history.WaitTimedOut, "the history holds no timeout: %v", types)
	require.Equal(t, append(deciding, history.SignalReceived), types[:len(deciding)+1])
	t.Logf("history: %v", types)
	enginetest.RequireProjectionsMatch(t, st)
}

func TestSignalWithARepeatedDedupIDIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.dedup", []string{"approval", "approval"}, []time.Duration{time.Hour, 50 * time.Millisecond})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, &sdk.StartOpts{IdempotencyKey: "order-7"})
		require.NoError(t, err)
		first, err := b.client.Signal(ctx, run.ID, "approval", "yes", &sdk.SignalOpts{DedupID: "click-1"})
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		again, err := b.client.SignalByKey(ctx, "order-7", "approval", "yes", &sdk.SignalOpts{DedupID: "click-1"})
		require.NoError(t, err)
		require.True(t, again.Duplicate, "the retried send is not written again")
		require.Equal(t, run.ID, again.TaskID)
		startWorker(t, b.worker)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"yes", true}, {"", false}})
		require.Len(t, eventsOf[history.SignalReceivedData](taskHistory(t, b.client, run.ID)), 1)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestWaitingTaskSurvivesItsWorkerStopping(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.crash", []string{"approval"}, []time.Duration{time.Hour})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		// The worker goes away while the task waits: it holds nothing of
		// the task, so nothing is lost.
		require.NoError(t, b.worker.StopAndCancel(ctx))
		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		other := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(other, wf)
		startWorker(t, other)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"yes", true}})
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A worker that dies (abandoned, not stopped: it writes nothing more)
// while its task waits loses nothing: the wait held no lease, so another
// worker, without a rescuer, finishes the task once the signal comes, and
// the step before the receive does not run again.
func TestWaitingTaskSurvivesItsWorkerCrashing(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		cfg := sdk.WorkerConfig{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1}
		b := setup(t, cfg)
		var prepares atomic.Int32
		wf := sdk.NewWorkflow("approve.crash.wait", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
			if _, err := workflow.Step(ctx, "prepare", func(context.Context) (bool, error) {
				prepares.Add(1)
				return true, nil
			}, nil); err != nil {
				return "", err
			}
			v, ok, err := workflow.Receive[string](ctx, "approval", time.Hour)
			if err != nil || !ok {
				return "", err
			}
			return workflow.Step(ctx, "ship", func(context.Context) (string, error) { return "shipped:" + v, nil }, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.NoError(t, b.worker.Start(ctx))
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		sdk.AbandonWorker(b.worker) // the worker dies while the task waits
		waiting := []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.WaitStarted}
		require.Equal(t, waiting, eventTypesOf(t, b.client, run.ID))

		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		other := b.newWorker(t, cfg) // no rescuer: nothing is left to rescue
		sdk.Register(other, wf)
		startWorker(t, other)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "shipped:yes", out)
		require.Equal(t, int32(1), prepares.Load(), "the step before the receive ran once")
		require.Equal(t, append(waiting, history.SignalReceived, history.AttemptStarted, history.StepCompleted, history.TaskCompleted),
			eventTypesOf(t, b.client, run.ID))
		stopWorker(t, other)
		_ = b.worker.Stop(ctx) // frees what the abandoned worker holds
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A worker that dies in the attempt a signal woke, after its receive took
// the signal and before the attempt recorded anything, loses nothing: the
// signal stays in the history, and the attempt after the lease expires
// takes it again.
func TestSignalSurvivesACrashOfTheAttemptThatTookIt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		cfg := sdk.WorkerConfig{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1}
		b := setup(t, cfg)
		hung := newSignal()
		var ships atomic.Int32
		wf := sdk.NewWorkflow("approve.crash.took", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
			v, ok, err := workflow.Receive[string](ctx, "approval", time.Hour)
			if err != nil || !ok {
				return "", err
			}
			return workflow.Step(ctx, "ship", func(ctx context.Context) (string, error) {
				if ships.Add(1) == 1 {
					hung.fire()
					<-ctx.Done() // the lease context: ends when the worker is abandoned
					return "", ctx.Err()
				}
				return "shipped:" + v, nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.NoError(t, b.worker.Start(ctx))
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		_, err = b.client.Signal(ctx, run.ID, "approval", "yes", nil)
		require.NoError(t, err)
		waitSignal(t, hung.ch, "the step after the receive")
		sdk.AbandonWorker(b.worker) // the worker dies holding the signalled task
		stopWorker(t, b.worker)     // waits for the abandoned attempt to return
		taken := []history.Type{history.TaskScheduled, history.AttemptStarted, history.WaitStarted,
			history.SignalReceived, history.AttemptStarted}
		require.Equal(t, taken, eventTypesOf(t, b.client, run.ID), "the abandoned attempt wrote nothing more")

		other := b.newWorker(t, sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond})
		sdk.Register(other, wf)
		startWorker(t, other)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "shipped:yes", out, "the next attempt took the same signal")
		require.Equal(t, int32(2), ships.Load())
		require.Equal(t, append(taken, history.LeaseExpired, history.AttemptStarted, history.StepCompleted, history.TaskCompleted),
			eventTypesOf(t, b.client, run.ID))
		require.Len(t, eventsOf[history.SignalReceivedData](taskHistory(t, b.client, run.ID)), 1)
		stopWorker(t, other)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestWaitTimesOutAtItsDeadline(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := receiveAll("approve.timeout", []string{"approval"}, []time.Duration{50 * time.Millisecond})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		requireReceived(t, waitTask(t, b.client, run.ID), []received{{"", false}})
		require.Equal(t, []history.Type{
			history.TaskScheduled, history.AttemptStarted, history.WaitStarted,
			history.AttemptStarted, history.WaitTimedOut, history.TaskCompleted,
		}, eventTypesOf(t, b.client, run.ID))
		// Finished: a signal now is refused, and nothing is written.
		_, err = b.client.Signal(ctx, run.ID, "approval", "too late", nil)
		require.ErrorIs(t, err, sdk.ErrTaskState)
		require.NotContains(t, eventTypesOf(t, b.client, run.ID), history.SignalReceived)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestReorderedReceiveIsNondeterministic(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var reordered atomic.Bool
		wf := sdk.NewWorkflow("approve.reorder", 1, func(ctx workflow.Context, _ struct{}) (string, error) {
			names := []string{"a", "b"}
			if reordered.Load() {
				names = []string{"b", "a"} // a code change between attempts
			}
			for _, name := range names {
				if _, _, err := workflow.Receive[string](ctx, name, time.Hour); err != nil {
					return "", err
				}
			}
			return "done", nil
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		reordered.Store(true)
		for _, name := range []string{"b", "a"} {
			_, err := b.client.Signal(ctx, run.ID, name, name, nil)
			require.NoError(t, err)
		}
		info := waitTask(t, b.client, run.ID)
		require.True(t, info.Status.Terminal())
		require.NotEqual(t, history.StatusCompleted, info.Status)
		require.NotNil(t, info.LastError)
		require.Contains(t, info.LastError.Message, `receive 0: history recorded a receive of signal "a", workflow called a receive of "b"`)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestSignalRefusals(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		_, err := b.client.Signal(ctx, uuid.New(), "approval", nil, nil)
		require.ErrorIs(t, err, sdk.ErrNotFound)
		_, err = b.client.SignalByKey(ctx, "no-such-key", "approval", nil, nil)
		require.ErrorIs(t, err, sdk.ErrNotFound)
		_, err = b.client.Signal(ctx, uuid.New(), "", nil, nil)
		require.Error(t, err)
	})
}

func indexOf(types []history.Type, typ history.Type) int {
	for i, tt := range types {
		if tt == typ {
			return i
		}
	}
	return -1
}
