package sdk_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// loopState is what a looping workflow carries from run to run.
type loopState struct {
	Done  int `json:"done"`  // steps done before this run
	Sum   int `json:"sum"`   // the sum of their outputs
	Total int `json:"total"` // steps to do in all; 0: forever
	Every int `json:"every"` // steps per run
}

// looper runs state.Every steps per run (as one workflow.Map), then
// continues as new with what it has done, until Total steps are done.
func looper(typ string) *sdk.Workflow[loopState, loopState] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, s loopState) (loopState, error) {
		items := make([]int, s.Every)
		for i := range items {
			items[i] = s.Done + i
		}
		outs, err := workflow.Map(ctx, "step", items, func(_ context.Context, n int) (int, error) { return n, nil }, nil)
		if err != nil {
			return s, err
		}
		for _, o := range outs {
			s.Sum += o
		}
		s.Done += s.Every
		if s.Total > 0 && s.Done >= s.Total {
			return s, nil
		}
		return s, workflow.ContinueAsNew(ctx, s)
	}, nil)
}

// chainOf walks the chain of runs from first by their links, checking each
// link both ways, and returns the runs' infos in order.
func chainOf(t *testing.T, c *sdk.Client, first uuid.UUID) []*sdk.TaskInfo {
	t.Helper()
	ctx := context.Background()
	var runs []*sdk.TaskInfo
	for id := first; ; {
		info, err := c.Get(ctx, id)
		require.NoError(t, err)
		if len(runs) == 0 {
			require.Nil(t, info.ContinuedFrom, "the first run continues none")
		} else {
			require.NotNil(t, info.ContinuedFrom, "run %d names no run it continues", len(runs))
			require.Equal(t, runs[len(runs)-1].ID, *info.ContinuedFrom)
		}
		runs = append(runs, info)
		if info.Status != history.StatusContinued {
			require.Nil(t, info.ContinuedAs)
			return runs
		}
		require.NotNil(t, info.ContinuedAs, "a continued run names its next")
		id = *info.ContinuedAs
	}
}

// TestContinueAsNewRunsALongLoop runs a workflow that continues as new
// every 1,000 steps for 10,000 steps (100,000 with CAIRN_LONG=1): each run's
// history stays under 1,100 events, Result on the first id returns the
// last run's output, and the runs are linked both ways.
func TestContinueAsNewRunsALongLoop(t *testing.T) {
	t.Parallel()
	total, every := 10_000, 1_000
	if os.Getenv("CAIRN_LONG") == "1" {
		total = 100_000
	}
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := looper("loop.long")
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()

		began := time.Now()
		run, err := sdk.Start(ctx, b.client, wf, loopState{Total: total, Every: every}, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		took := time.Since(began)
		require.Equal(t, total, out.Done)
		require.Equal(t, total*(total-1)/2, out.Sum)

		runs := chainOf(t, b.client, run.ID)
		require.Len(t, runs, total/every)
		require.Equal(t, history.StatusCompleted, runs[len(runs)-1].Status)
		longest := 0
		for i, r := range runs {
			if i < len(runs)-1 {
				require.Equal(t, history.StatusContinued, r.Status)
			}
			require.Equal(t, "loop.long", r.Type)
			events, err := b.client.RawHistory(ctx, r.ID)
			require.NoError(t, err)
			longest = max(longest, len(events))
			require.LessOrEqual(t, len(events), 1_100, "run %d's history", i)
		}
		t.Logf("%d steps in %d runs took %s; the longest history holds %d events", total, len(runs), took.Round(time.Millisecond), longest)
	})
}

// TestContinueAsNewCancelOnTheFirstIDStopsTheChain cancels, by its first
// id, a workflow that continues as new forever: the run current then ends
// cancelled, and no further run starts.
func TestContinueAsNewCancelOnTheFirstIDStopsTheChain(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := looper("loop.forever")
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, wf, loopState{Every: 5}, nil)
		require.NoError(t, err)
		// Mid-chain: the first run has continued.
		require.Eventually(t, func() bool {
			info, err := b.client.Get(ctx, run.ID)
			return err == nil && info.ContinuedAs != nil
		}, testTimeout, 10*time.Millisecond)

		require.NoError(t, b.client.Cancel(ctx, run.ID, "enough"))
		_, err = run.Result(ctx)
		require.ErrorIs(t, err, sdk.ErrCancelled)

		runs := chainOf(t, b.client, run.ID)
		require.GreaterOrEqual(t, len(runs), 2)
		last := runs[len(runs)-1]
		require.Equal(t, history.StatusCancelled, last.Status)
		all, err := tasksOfType(ctx, b.client, "loop.forever")
		require.NoError(t, err)
		require.Len(t, all, len(runs), "a run started after the cancel")
		// Cancelling again, by any id of the chain, changes nothing.
		require.NoError(t, b.client.Cancel(ctx, run.ID, "again"))
	})
}

// TestContinueAsNewChildReportsItsLastRun: a child that continues as new
// twice reports to its parent when its last run ends, with that run's
// output; the parent knows it by its first run's id.
func TestContinueAsNewChildReportsItsLastRun(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		child := sdk.NewWorkflow("count.child", 1, func(ctx workflow.Context, n int) (int, error) {
			n, err := workflow.Step(ctx, "inc", func(context.Context) (int, error) { return n + 1, nil }, nil)
			if err != nil || n >= 3 {
				return n * 10, err
			}
			return 0, workflow.ContinueAsNew(ctx, n)
		}, nil)
		parent := sdk.NewWorkflow("count.parent", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			return workflow.StartChild(ctx, child, 0, nil).Result(ctx)
		}, nil)
		sdk.Register(b.worker, child)
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, parent, struct{}{}, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 30, out)

		events := taskHistory(t, b.client, run.ID)
		started := eventsOf[history.ChildStartedData](events)
		finished := eventsOf[history.ChildFinishedData](events)
		require.Len(t, started, 1)
		require.Len(t, finished, 1)
		runs := chainOf(t, b.client, uuid.MustParse(started[0].ChildID))
		require.Len(t, runs, 3)
		last := runs[2]
		require.Equal(t, started[0].ChildID, finished[0].ChildID)
		require.Equal(t, last.ID.String(), finished[0].RunID)
		for _, r := range runs {
			require.NotNil(t, r.ParentID, "run %s lost its parent", r.ID)
			require.Equal(t, run.ID, *r.ParentID)
		}
	})
}

// TestContinueAsNewIdempotencyKeyResolvesToTheChain: a keyed start of a
// chain returns the first run's id, again after it continued, and Result
// on it follows the chain.
func TestContinueAsNewIdempotencyKeyResolvesToTheChain(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := looper("loop.keyed")
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		in := loopState{Total: 15, Every: 5}
		opts := &sdk.StartOpts{IdempotencyKey: "order-7"}
		first, err := sdk.Start(ctx, b.client, wf, in, opts)
		require.NoError(t, err)
		require.False(t, first.Existing)
		out, err := first.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 15, out.Done)

		again, err := sdk.Start(ctx, b.client, wf, in, opts)
		require.NoError(t, err)
		require.True(t, again.Existing)
		require.Equal(t, first.ID, again.ID)
		out, err = again.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 15, out.Done)
		require.Len(t, chainOf(t, b.client, first.ID), 3)
	})
}

// TestContinueAsNewRefusesAnInputOverTheLimit: the next run's input is
// bounded as a start's: over the worker's MaxPayloadBytes, the run fails
// permanently and no next run starts.
func TestContinueAsNewRefusesAnInputOverTheLimit(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{MaxPayloadBytes: 100})
		wf := sdk.NewWorkflow("grow", 1, func(ctx workflow.Context, s string) (string, error) {
			return "", workflow.ContinueAsNew(ctx, s+strings.Repeat("x", 200))
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		_, err = run.Result(ctx)
		require.ErrorIs(t, err, sdk.ErrFailed)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, run.ID, info.ID)
		require.NotNil(t, info.LastError)
		require.Equal(t, "bad_continue_input", info.LastError.Kind)
		require.Contains(t, info.LastError.Message, "MaxPayloadBytes")
		all, err := tasksOfType(ctx, b.client, "grow")
		require.NoError(t, err)
		require.Len(t, all, 1)
	})
}

// TestContinueAsNewClosesRunningChildren: a run that continues as new
// with a child still running closes it by its policy (cancel, the
// default), as a parent ending otherwise than completing does; the next
// run goes on without it.
func TestContinueAsNewClosesRunningChildren(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		waiter := sdk.NewWorkflow("cont.waiter", 1, func(ctx workflow.Context, _ struct{}) (bool, error) {
			ok, _, err := workflow.Receive[bool](ctx, "go", time.Hour)
			return ok, err
		}, nil)
		parent := sdk.NewWorkflow("cont.parent", 1, func(ctx workflow.Context, n int) (int, error) {
			if n == 0 {
				workflow.StartChild(ctx, waiter, struct{}{}, nil)
				return 0, workflow.ContinueAsNew(ctx, 1)
			}
			return n, nil
		}, nil)
		sdk.Register(b.worker, waiter)
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, parent, 0, nil)
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, out)
		started := eventsOf[history.ChildStartedData](taskHistory(t, b.client, run.ID))
		require.Len(t, started, 1)
		child := waitTask(t, b.client, uuid.MustParse(started[0].ChildID))
		require.Equal(t, history.StatusCancelled, child.Status)
	})
}

// TestContinueAsNewSignalsReachTheCurrentRun: an agent loop that takes a
// message and continues as new: signals sent to its first id, or by its
// idempotency key, reach the run current then; a signal for one receive
// (ForWait) does not follow the chain.
func TestContinueAsNewSignalsReachTheCurrentRun(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		chat := sdk.NewWorkflow("chat", 1, func(ctx workflow.Context, heard []string) ([]string, error) {
			msg, ok, err := workflow.Receive[string](ctx, "msg", time.Hour)
			if err != nil || !ok {
				return heard, err
			}
			heard = append(heard, msg)
			if msg == "bye" {
				return heard, nil
			}
			return nil, workflow.ContinueAsNew(ctx, heard)
		}, nil)
		sdk.Register(b.worker, chat)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()

		run, err := sdk.Start(ctx, b.client, chat, nil, &sdk.StartOpts{IdempotencyKey: "chat-1"})
		require.NoError(t, err)
		// runs waits until the chain has n runs.
		runs := func(n int) {
			require.Eventually(t, func() bool {
				latest, err := b.client.Get(ctx, run.ID)
				count := 1
				for err == nil && latest.ContinuedAs != nil {
					count++
					latest, err = b.client.Get(ctx, *latest.ContinuedAs)
				}
				return err == nil && count >= n
			}, testTimeout, 5*time.Millisecond)
		}
		_, err = b.client.Signal(ctx, run.ID, "msg", "hello", nil)
		require.NoError(t, err)
		runs(2)
		res, err := b.client.Signal(ctx, run.ID, "msg", "again", nil)
		require.NoError(t, err)
		require.NotEqual(t, run.ID, res.TaskID, "the current run took it")
		runs(3)
		zero := 0
		_, err = b.client.Signal(ctx, run.ID, "msg", "late", &sdk.SignalOpts{ForWait: &zero})
		require.ErrorIs(t, err, sdk.ErrWaitEnded, "a signal for one receive of the first run")
		_, err = b.client.SignalByKey(ctx, "chat-1", "msg", "bye", nil)
		require.NoError(t, err)

		heard, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"hello", "again", "bye"}, heard)
	})
}

// TestContinueAsNewAfterASignalReplays: a signal that reaches a run after
// its workflow decided to continue, before the continue is written, hands
// the attempt back (with the last step on record: it runs once), and the
// next attempt replays with the signal in the history.
func TestContinueAsNewAfterASignalReplays(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var pings atomic.Int32
		key := "ping-" + uuid.NewString()
		wf := sdk.NewWorkflow("pinger", 1, func(ctx workflow.Context, n int) (int, error) {
			if _, err := workflow.Step(ctx, "ping", func(ctx context.Context) (int, error) {
				if n == 0 {
					pings.Add(1)
					_, err := b.client.SignalByKey(ctx, key, "more", "x", nil)
					return 0, err
				}
				return 0, nil
			}, nil); err != nil {
				return 0, err
			}
			if n == 0 {
				return 0, workflow.ContinueAsNew(ctx, 1)
			}
			return n, nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, 0, &sdk.StartOpts{IdempotencyKey: key})
		require.NoError(t, err)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, out)
		require.Equal(t, int32(1), pings.Load(), "the step ran once")
		types := eventTypesOf(t, b.client, run.ID)
		require.Contains(t, types, history.SignalReceived)
		require.Contains(t, types, history.TaskReleased, "the continue after the signal handed the attempt back: %v", types)
		require.Equal(t, history.TaskContinued, types[len(types)-1])
	})
}

// TestContinueAsNewFailureKeepsTheLastStep: a continue the database
// refuses (here a trigger refuses every new task) fails the attempt
// transiently, with its last step on record: the retry does not run the
// step again.
func TestContinueAsNewFailureKeepsTheLastStep(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var pings atomic.Int32
		retry := activities.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, Multiplier: 2, MaxInterval: time.Millisecond}
		wf := sdk.NewWorkflow("refused-continue", 1, func(ctx workflow.Context, n int) (int, error) {
			if _, err := workflow.Step(ctx, "ping", func(context.Context) (int, error) { return int(pings.Add(1)), nil }, nil); err != nil {
				return 0, err
			}
			return 0, workflow.ContinueAsNew(ctx, n+1)
		}, &sdk.WorkflowOpts{Retry: &retry})
		sdk.Register(b.worker, wf)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, 0, nil)
		require.NoError(t, err)
		// From now on no task starts: the continue's next run is refused.
		if b.store != nil {
			_, err = b.store.(*sqlitestore.Store).DB().ExecContext(ctx, `CREATE TRIGGER refuse_starts BEFORE INSERT ON tasks BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
		} else {
			_, err = b.pool.Exec(ctx, `CREATE FUNCTION `+b.schema+`.refuse_starts() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$;
				CREATE TRIGGER refuse_starts BEFORE INSERT ON `+b.schema+`.tasks FOR EACH ROW EXECUTE FUNCTION `+b.schema+`.refuse_starts()`)
		}
		require.NoError(t, err)
		startWorker(t, b.worker)

		info, err := b.client.Wait(ctx, run.ID)
		require.NoError(t, err)
		require.NotEqual(t, history.StatusContinued, info.Status)
		require.Equal(t, 2, info.Attempt, "the refused continue failed the attempt, to retry")
		require.Equal(t, int32(1), pings.Load(), "the step ran once")
		require.NotNil(t, info.LastError)
		require.Contains(t, info.LastError.Message, "refused by the test")
	})
}

// TestContinueAsNewWaitIsBounded: Wait follows a live chain as it grows,
// but on a finished chain reads the run it is given, then jumps from the
// run it continued as to the last through at most engine.MaxChainHops
// runs: past that, it is refused and a later run's id waits.
func TestContinueAsNewWaitIsBounded(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := looper("loop.hops")
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		total := engine.MaxChainHops + 3 // runs; all but the last continue
		run, err := sdk.Start(ctx, b.client, wf, loopState{Total: total, Every: 1}, nil)
		require.NoError(t, err)
		last, err := b.client.Wait(ctx, run.ID)
		require.NoError(t, err, "a live chain is followed run by run")
		require.Equal(t, history.StatusCompleted, last.Status)
		require.NotNil(t, last.ContinuedFrom)

		_, err = b.client.Wait(ctx, run.ID)
		require.ErrorIs(t, err, engine.ErrChainTooLong)
		require.ErrorIs(t, err, sdk.ErrTaskState, "the edge answers it as a refusal (409), not a failure")
		first, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		again, err := b.client.Wait(ctx, *first.ContinuedAs)
		require.NoError(t, err, "%d runs past the third run", engine.MaxChainHops)
		require.Equal(t, last.ID, again.ID)
		require.Equal(t, *last.ContinuedFrom, *again.ContinuedFrom, "the run before the last, read from its history")
	})
}

// TestContinueAsNewSignalFollowsARunThatContinuesMeanwhile: a signal
// passed on to a chain's current run that continues before the signal
// reaches it is passed on again, to the run after it.
func TestContinueAsNewSignalFollowsARunThatContinuesMeanwhile(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		chat := sdk.NewWorkflow("chat.race", 1, func(ctx workflow.Context, heard []string) ([]string, error) {
			msg, ok, err := workflow.Receive[string](ctx, "msg", time.Hour)
			if err != nil || !ok {
				return heard, err
			}
			heard = append(heard, msg)
			if msg == "bye" {
				return heard, nil
			}
			return heard, workflow.ContinueAsNew(ctx, heard)
		}, nil)
		sdk.Register(b.worker, chat)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		continued := func(id uuid.UUID) *sdk.TaskInfo {
			var info *sdk.TaskInfo
			require.Eventually(t, func() bool {
				var err error
				info, err = b.client.Get(ctx, id)
				return err == nil && info.Status == history.StatusContinued
			}, testTimeout, 5*time.Millisecond)
			return info
		}

		run, err := sdk.Start(ctx, b.client, chat, nil, nil)
		require.NoError(t, err)
		_, err = b.client.Signal(ctx, run.ID, "msg", "hello", nil)
		require.NoError(t, err)
		second := *continued(run.ID).ContinuedAs
		var raced atomic.Bool
		sdk.SetBeforeForward(b.client, func(to uuid.UUID) {
			if raced.Swap(true) {
				return
			}
			// The run the signal is about to be passed on to continues
			// first.
			require.Equal(t, second, to)
			_, err := b.client.Signal(ctx, to, "msg", "between", nil)
			require.NoError(t, err)
			continued(to)
		})
		res, err := b.client.Signal(ctx, run.ID, "msg", "again", nil)
		require.NoError(t, err, "the chain is alive: the signal reaches its run after")
		third := *continued(second).ContinuedAs
		require.Equal(t, third, res.TaskID)
		continued(third) // a run takes one signal: the next is for the run after
		_, err = b.client.Signal(ctx, run.ID, "msg", "bye", nil)
		require.NoError(t, err)
		heard, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"hello", "between", "again", "bye"}, heard)
	})
}

// TestContinueAsNewChainOfAnErasedRun: a continued run is finished, so it
// may be erased (encrypted namespace); its task_erased then follows its
// task_continued, and Get, signals and Wait on its id still follow the
// chain.
func TestContinueAsNewChainOfAnErasedRun(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var st store.Store
		if embedded {
			lite, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "cairn.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = lite.Close() })
			st = lite
		} else {
			st = enginetest.Store(t)
		}
		codec := oneKey(t)
		client := newClient(t, sdk.ClientConfig{Store: st, Keys: codec, Identity: "dpo"})
		worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Keys: codec, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		wf := sdk.NewWorkflow("erased.chain", 1, func(ctx workflow.Context, n int) (int, error) {
			if n == 0 {
				return 0, workflow.ContinueAsNew(ctx, 1)
			}
			msg, _, err := workflow.Receive[int](ctx, "go", time.Hour)
			return n + msg, err
		}, nil)
		sdk.Register(worker, wf)
		startWorker(t, worker)

		run, err := sdk.Start(ctx, client, wf, 0, nil)
		require.NoError(t, err)
		var first *sdk.TaskInfo
		require.Eventually(t, func() bool {
			first, err = client.Get(ctx, run.ID)
			return err == nil && first.Status == history.StatusContinued
		}, testTimeout, 5*time.Millisecond)
		require.NoError(t, client.Erase(ctx, run.ID, "closed account"))

		erased, err := client.Get(ctx, run.ID)
		require.NoError(t, err, "Get reads past task_erased")
		require.Equal(t, first.ContinuedAs, erased.ContinuedAs)
		res, err := client.Signal(ctx, run.ID, "go", 41, nil)
		require.NoError(t, err, "the signal is passed on")
		require.Equal(t, *first.ContinuedAs, res.TaskID)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 42, out)
	})
}
