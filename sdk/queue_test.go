package sdk_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A per-queue limit of 3 holds across three workers of five slots each:
// the steps count the concurrency they see.
func TestQueueConcurrencyLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Queues: []string{"gpu"}, Concurrency: 5})
		require.NoError(t, b.client.SetQueue(context.Background(), "gpu", sdk.QueueSettings{Concurrency: 3}))
		var running, most atomic.Int32
		wf := sdk.NewWorkflow("ocr.gpu", 1, func(ctx workflow.Context, _ int) (string, error) {
			return workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
				now := running.Add(1)
				defer running.Add(-1)
				for {
					seen := most.Load()
					if now <= seen || most.CompareAndSwap(seen, now) {
						break
					}
				}
				time.Sleep(30 * time.Millisecond)
				return "text", nil
			}, nil)
		}, &sdk.WorkflowOpts{Queue: "gpu"})
		workers := []*sdk.Worker{b.worker,
			b.newWorker(t, sdk.WorkerConfig{Queues: []string{"gpu"}, Concurrency: 5}),
			b.newWorker(t, sdk.WorkerConfig{Queues: []string{"gpu"}, Concurrency: 5})}
		for _, w := range workers {
			sdk.Register(w, wf)
			startWorker(t, w)
		}
		starts := make([]sdk.StartParams, 30)
		for i := range starts {
			starts[i] = sdk.StartEntry(wf, i, nil)
		}
		res, err := b.client.StartMany(context.Background(), starts)
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, history.StatusCompleted, waitTask(t, b.client, r.ID).Status)
		}
		require.LessOrEqual(t, most.Load(), int32(3), "the limit holds across workers")
		require.GreaterOrEqual(t, most.Load(), int32(2), "the queue did run tasks side by side")
		for _, w := range workers {
			stopWorker(t, w)
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestFullQueueRefusesStart(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		wf := sdk.NewWorkflow("mail.send", 1, func(workflow.Context, string) (string, error) { return "", nil },
			&sdk.WorkflowOpts{Queue: "mail"})
		require.NoError(t, b.client.SetQueue(ctx, "mail", sdk.QueueSettings{MaxWaiting: 2}))
		for range 2 {
			_, err := sdk.Start(ctx, b.client, wf, "x", nil)
			require.NoError(t, err)
		}
		_, err := sdk.Start(ctx, b.client, wf, "x", nil)
		require.True(t, errors.Is(err, sdk.ErrQueueFull), "%v", err)
		var full *store.QueueFullError
		require.True(t, errors.As(err, &full))
		require.Equal(t, "mail", full.Queue)
		require.Positive(t, full.RetryAfter)
		queues, err := b.client.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, queues, 1)
		require.Equal(t, 2, queues[0].Waiting, "the refused start wrote nothing")
		require.Error(t, b.client.SetQueue(ctx, "bad queue", sdk.QueueSettings{}))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Delayed tasks, with a worker running all along, start no earlier than
// their run time.
func TestDelayedTaskNeverStartsEarly(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("followup.send", 1, func(workflow.Context, int) (int, error) { return 0, nil }, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		var ids []*sdk.Run[int]
		for i := range 5 {
			r, err := sdk.Start(ctx, b.client, wf, i, &sdk.StartOpts{Delay: time.Duration(i+1) * 150 * time.Millisecond})
			require.NoError(t, err)
			ids = append(ids, r)
		}
		r, err := sdk.Start(ctx, b.client, wf, 9, &sdk.StartOpts{RunAt: time.Now().Add(400 * time.Millisecond)})
		require.NoError(t, err)
		ids = append(ids, r)
		for _, r := range ids {
			info := waitTask(t, b.client, r.ID)
			require.Equal(t, history.StatusCompleted, info.Status)
			require.False(t, info.StartedAt.Before(info.RunAt), "started %s, due %s", info.StartedAt, info.RunAt)
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestTaskPastItsStartDeadlineExpires(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond})
		var runs atomic.Int32
		wf := sdk.NewWorkflow("reply.typing", 1, func(ctx workflow.Context, _ string) (string, error) {
			runs.Add(1)
			return "", nil
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", &sdk.StartOpts{StartDeadline: time.Now().Add(50 * time.Millisecond)})
		require.NoError(t, err)
		fresh, err := sdk.Start(ctx, b.client, wf, "", &sdk.StartOpts{StartDeadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		_, err = sdk.Start(ctx, b.client, wf, "", &sdk.StartOpts{StartDeadline: time.Now().Add(-time.Second)})
		require.ErrorContains(t, err, "StartDeadline")
		time.Sleep(100 * time.Millisecond) // the first one's start deadline passes with no worker running
		startWorker(t, b.worker)

		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusExpired, info.Status)
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.TaskExpired}, eventTypes(events))
		require.Contains(t, eventsOf[history.TaskExpiredData](events)[0].Reason, "not started by its start deadline")
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, fresh.ID).Status)
		require.Equal(t, int32(1), runs.Load(), "only the task within its start deadline ran")
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// One worker slot, ten sleeping workflows and one other task: the other
// task runs while they sleep (no slot is held by a sleeper), and each
// sleeper wakes no earlier than its timer.
func TestDurableSleepHoldsNoSlot(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 1})
		// Long enough that, even on a loaded machine, all ten are asleep and
		// the other task has run before the first wakes.
		const nap = 3 * time.Second
		var otherDone atomic.Int64
		sleeper := sdk.NewWorkflow("reminder.send", 1, func(ctx workflow.Context, _ int) (string, error) {
			if _, err := workflow.Step(ctx, "schedule", func(context.Context) (string, error) { return "ok", nil }, nil); err != nil {
				return "", err
			}
			if err := workflow.Sleep(ctx, nap); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "send", func(context.Context) (string, error) { return "sent", nil }, nil)
		}, nil)
		other := sdk.NewWorkflow("reply.now", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "reply", func(context.Context) (string, error) {
				otherDone.Store(time.Now().UnixNano())
				return "replied", nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, sleeper)
		sdk.Register(b.worker, other)
		startWorker(t, b.worker)
		ctx := context.Background()
		var sleepers []*sdk.Run[string]
		for i := range 10 {
			res, err := sdk.Start(ctx, b.client, sleeper, i, nil)
			require.NoError(t, err)
			sleepers = append(sleepers, res)
		}
		// Once all ten sleep, the other task gets the only slot.
		require.Eventually(t, func() bool {
			for _, s := range sleepers {
				if len(eventsOf[history.TimerStartedData](taskHistory(t, b.client, s.ID))) == 0 {
					return false
				}
			}
			return true
		}, testTimeout, 10*time.Millisecond)
		res, err := sdk.Start(ctx, b.client, other, "hi", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)

		for _, s := range sleepers {
			info := waitTask(t, b.client, s.ID)
			require.Equal(t, history.StatusCompleted, info.Status)
			events := taskHistory(t, b.client, s.ID)
			require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
				history.TimerStarted, history.AttemptStarted, history.TimerFired, history.StepCompleted, history.TaskCompleted},
				eventTypes(events))
			var fireAt, firedAt time.Time
			for _, e := range events {
				switch p := e.Data.(type) {
				case history.TimerStartedData:
					fireAt = p.FireAt
					require.Equal(t, 1, p.Position)
				case history.TimerFiredData:
					firedAt = e.At
				}
			}
			require.False(t, firedAt.Before(fireAt), "woke at %s, before its timer at %s", firedAt, fireAt)
			require.Less(t, otherDone.Load(), fireAt.UnixNano(), "the other task ran while the sleepers slept")
			require.Equal(t, []string{"schedule", "sleep", "send"}, stepNames(events))
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func stepNames(events []history.Event) []string {
	var names []string
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.StepCompletedData:
			names = append(names, p.Name)
		case history.TimerFiredData:
			names = append(names, history.SleepStepName)
		}
	}
	return names
}

// Three engine processes (workers, each with a rescuer that may lead) over
// several ticks of a per-second schedule: each tick makes exactly one task.
func TestScheduleFiresOncePerTickAcrossProcesses(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		cfg := sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond}
		b := setup(t, cfg)
		var runs atomic.Int32
		wf := sdk.NewWorkflow("report.tick", 1, func(ctx workflow.Context, in map[string]string) (string, error) {
			runs.Add(1)
			return in["report"], nil
		}, nil)
		ctx := context.Background()
		require.NoError(t, b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "every-second", Cron: "* * * * * *",
			Timezone: "Europe/Berlin", Workflow: wf, Input: map[string]string{"report": "weekly"}}))
		err := b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "every-second", Cron: "* * * * * *", Workflow: wf})
		require.True(t, errors.Is(err, store.ErrConflict), "%v", err)
		err = b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "bad", Cron: "61 * * * *", Workflow: wf})
		require.ErrorContains(t, err, `cron expression "61 * * * *"`)
		err = b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "bad", Cron: "@daily", Timezone: "Mars/Olympus", Workflow: wf})
		require.ErrorContains(t, err, `time zone "Mars/Olympus"`)

		workers := []*sdk.Worker{b.worker, b.newWorker(t, cfg), b.newWorker(t, cfg)}
		for _, w := range workers {
			sdk.Register(w, wf)
			startWorker(t, w)
		}
		time.Sleep(3500 * time.Millisecond) // three or four ticks
		require.NoError(t, b.client.PauseSchedule(ctx, "every-second"))
		for _, w := range workers {
			stopWorker(t, w)
		}

		tasks, err := b.client.List(ctx, &sdk.ListOpts{Type: "report.tick", Limit: 100, IncludeInput: true})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(tasks), 2)
		seen := map[string]bool{}
		for _, task := range tasks {
			require.True(t, strings.HasPrefix(task.IdempotencyKey, "schedule:every-second:"), task.IdempotencyKey)
			require.False(t, seen[task.IdempotencyKey], "tick %s fired twice", task.IdempotencyKey)
			seen[task.IdempotencyKey] = true
			require.Equal(t, "every-second", task.Labels["schedule"])
			require.JSONEq(t, `{"report":"weekly"}`, string(task.Input))
		}
		// One task per tick, none skipped: the ticks are consecutive seconds.
		var ticks []time.Time
		for key := range seen {
			tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(key, "schedule:every-second:"))
			require.NoError(t, err)
			ticks = append(ticks, tick)
		}
		slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ticks); i++ {
			require.Equal(t, time.Second, ticks[i].Sub(ticks[i-1]), "ticks %v", ticks)
		}
		schedules, err := b.client.Schedules(ctx)
		require.NoError(t, err)
		require.Len(t, schedules, 1)
		require.True(t, schedules[0].Paused)
		require.NotNil(t, schedules[0].LastTick)
		require.NoError(t, b.client.DeleteSchedule(ctx, "every-second"))
		require.True(t, errors.Is(b.client.DeleteSchedule(ctx, "every-second"), sdk.ErrNotFound))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// The leader fires a schedule at its tick, not at its next rescue pass: with
// a pass every ten seconds, a per-second schedule still makes a task each
// second, each within a second of its tick.
func TestScheduleFiresAtItsTick(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{RescueInterval: 10 * time.Second})
		wf := sdk.NewWorkflow("report.precise", 1, func(ctx workflow.Context, _ string) (string, error) { return "", nil }, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.NoError(t, b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "precise", Cron: "* * * * * *", Workflow: wf}))
		startWorker(t, b.worker)
		time.Sleep(3500 * time.Millisecond)
		require.NoError(t, b.client.PauseSchedule(ctx, "precise"))
		stopWorker(t, b.worker)
		tasks, err := b.client.List(ctx, &sdk.ListOpts{Type: "report.precise", Limit: 100})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(tasks), 2, "ticks fired between rescue passes")
		for _, task := range tasks {
			tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(task.IdempotencyKey, "schedule:precise:"))
			require.NoError(t, err)
			late := task.CreatedAt.Sub(tick)
			require.GreaterOrEqual(t, late, time.Duration(0), "tick %s fired early", tick)
			require.Less(t, late, time.Second, "tick %s fired %s late", tick, late)
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Under a flood of high-priority work, low-priority tasks still start soon:
// one claim slot in eight goes to the longest-waiting task.
func TestLowPriorityIsNotStarved(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 10})
		wf := sdk.NewWorkflow("work.any", 1, func(ctx workflow.Context, _ int) (int, error) { return 0, nil }, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		var low []sdk.StartParams
		for i := range 5 {
			low = append(low, sdk.StartEntry(wf, i, &sdk.StartOpts{Priority: -10}))
		}
		lowRes, err := b.client.StartMany(ctx, low)
		require.NoError(t, err)
		const flood = 1500
		high := make([]sdk.StartParams, flood)
		for i := range high {
			high[i] = sdk.StartEntry(wf, i, &sdk.StartOpts{Priority: 10})
		}
		highRes, err := b.client.StartMany(ctx, high)
		require.NoError(t, err)
		waits, err := b.client.QueueWaits(ctx)
		require.NoError(t, err)
		require.Len(t, waits, 2, "the wait is visible per queue and priority")
		require.Equal(t, store.QueueWait{Queue: "default", Priority: 10, Waiting: flood, Oldest: waits[0].Oldest}, waits[0])
		require.Equal(t, -10, waits[1].Priority)
		require.Equal(t, 5, waits[1].Waiting)
		require.False(t, waits[1].Oldest.After(waits[0].Oldest), "the low-priority tasks have waited longest")
		startWorker(t, b.worker)

		var highStarts []time.Time
		for _, r := range highRes {
			highStarts = append(highStarts, *waitTask(t, b.client, r.ID).StartedAt)
		}
		for _, r := range lowRes {
			started := *waitTask(t, b.client, r.ID).StartedAt
			before := 0
			for _, h := range highStarts {
				if h.Before(started) {
					before++
				}
			}
			// Without aging all 1,500 would go first; with it, the five oldest
			// tasks take the reserved slot of the first claims.
			require.Less(t, before, 300, "a low-priority task waited for %d of %d high-priority ones", before, flood)
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Tenant a floods the queue with 5,000 tasks, then tenant b sends 10: b's
// tasks all start before a's backlog is a tenth drained, since due tasks are
// served round robin across fairness keys.
func TestFairnessKeysServeTenantsRoundRobin(t *testing.T) {
	t.Parallel()
	b := setup(t, sdk.WorkerConfig{Concurrency: 10})
	wf := sdk.NewWorkflow("chat.reply", 1, func(ctx workflow.Context, _ int) (int, error) {
		return workflow.Step(ctx, "reply", func(context.Context) (int, error) {
			return 0, nil
		}, nil)
	}, nil)
	sdk.Register(b.worker, wf)
	startWorker(t, b.worker)
	ctx := context.Background()
	const flood = 5000
	starts := make([]sdk.StartParams, flood)
	for i := range starts {
		starts[i] = sdk.StartEntry(wf, i, &sdk.StartOpts{FairnessKey: "tenant-a"})
	}
	aRes, err := b.client.StartMany(ctx, starts)
	require.NoError(t, err)
	var bIDs []*sdk.Run[int]
	for i := range 10 {
		r, err := sdk.Start(ctx, b.client, wf, i, &sdk.StartOpts{FairnessKey: "tenant-b"})
		require.NoError(t, err)
		bIDs = append(bIDs, r)
	}
	var lastB time.Time
	for _, r := range bIDs {
		info := waitTask(t, b.client, r.ID)
		require.Equal(t, "tenant-b", info.FairnessKey)
		if info.StartedAt.After(lastB) {
			lastB = *info.StartedAt
		}
	}
	aBefore := 0
	for _, r := range aRes {
		info := waitTask(t, b.client, r.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		if info.StartedAt.Before(lastB) {
			aBefore++
		}
	}
	t.Logf("tenant a's tasks started before tenant b's last: %d of %d", aBefore, flood)
	require.Less(t, aBefore, flood/10, "tenant b waited behind %d of tenant a's %d tasks", aBefore, flood)
	stopWorker(t, b.worker)
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}

// Killing the leader: another worker takes the leader lease over within
// its lifetime, and the schedule goes on with no tick doubled or lost.
func TestLeaderCrashHandsOverSchedules(t *testing.T) {
	t.Parallel()
	cfg := sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond}
	b := setup(t, cfg)
	wf := sdk.NewWorkflow("report.tick", 1, func(workflow.Context, string) (string, error) { return "", nil }, nil)
	ctx := context.Background()
	require.NoError(t, b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "tick", Cron: "* * * * * *", Workflow: wf}))
	workers := map[string]*sdk.Worker{}
	for _, id := range []string{"worker-a", "worker-b"} {
		c := cfg
		c.WorkerID = id
		w := b.newWorker(t, c)
		sdk.Register(w, wf)
		require.NoError(t, w.Start(context.Background()))
		workers[id] = w
	}
	leader := func() string {
		var owner string
		err := b.pool.QueryRow(ctx, "SELECT owner FROM "+pgx.Identifier{b.schema, "leaders"}.Sanitize()+
			" WHERE name = 'rescuer' AND expires_at > now()").Scan(&owner)
		if err != nil {
			return ""
		}
		return owner
	}
	require.Eventually(t, func() bool { return leader() != "" }, testTimeout, 10*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	// A loaded machine can let the short lease lapse between passes: take
	// the leader of the moment.
	var first string
	require.Eventually(t, func() bool { first = leader(); return first != "" }, testTimeout, 10*time.Millisecond)
	sdk.AbandonWorker(workers[first]) // the leader dies
	survivor := "worker-a"
	if first == survivor {
		survivor = "worker-b"
	}
	require.Eventually(t, func() bool { return leader() == survivor }, 2*time.Second, 10*time.Millisecond,
		"the survivor takes over once the dead leader's lease (three rescue intervals) expires")
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, b.client.PauseSchedule(ctx, "tick"))
	_ = workers[survivor].Stop(ctx)
	_ = workers[first].Stop(ctx)

	tasks, err := b.client.List(ctx, &sdk.ListOpts{Type: "report.tick", Limit: 100})
	require.NoError(t, err)
	var ticks []time.Time
	for _, task := range tasks {
		tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(task.IdempotencyKey, "schedule:tick:"))
		require.NoError(t, err)
		ticks = append(ticks, tick)
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	require.GreaterOrEqual(t, len(ticks), 3)
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, time.Second, ticks[i].Sub(ticks[i-1]), "no tick lost or doubled across the hand-over: %v", ticks)
	}
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}

// A rate limit of 10 starts per second holds across two workers: the
// starts fit a token bucket of 10, refilled at 10 a second.
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 8, PollInterval: 20 * time.Millisecond})
		wf := sdk.NewWorkflow("llm.call", 1, func(ctx workflow.Context, _ int) (int, error) { return 0, nil }, nil)
		ctx := context.Background()
		const perSecond = 10
		require.NoError(t, b.client.SetRateLimit(ctx, "llm.call", perSecond, time.Second))
		require.Error(t, b.client.SetRateLimit(ctx, "llm.call", 0, time.Second))
		starts := make([]sdk.StartParams, 30)
		for i := range starts {
			starts[i] = sdk.StartEntry(wf, i, nil)
		}
		res, err := b.client.StartMany(ctx, starts)
		require.NoError(t, err)
		second := b.newWorker(t, sdk.WorkerConfig{Concurrency: 8, PollInterval: 20 * time.Millisecond})
		for _, w := range []*sdk.Worker{b.worker, second} {
			sdk.Register(w, wf)
			startWorker(t, w)
		}
		var at []time.Time
		for _, r := range res {
			info := waitTask(t, b.client, r.ID)
			require.Equal(t, history.StatusCompleted, info.Status)
			at = append(at, *info.StartedAt)
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		// A bucket of N refilled at N/s allows at most N + N*d starts in any
		// stretch of d seconds (with a little slack for clock rounding).
		for i := range at {
			for j := i; j < len(at); j++ {
				d := at[j].Sub(at[i]).Seconds()
				require.LessOrEqual(t, float64(j-i+1), perSecond+perSecond*d+1,
					"%d starts within %.3fs", j-i+1, d)
			}
		}
		require.Greater(t, at[len(at)-1].Sub(at[0]), time.Second, "30 starts at 10/s take at least two seconds after the first ten")
		for _, w := range []*sdk.Worker{b.worker, second} {
			stopWorker(t, w)
		}
		require.NoError(t, b.client.RemoveRateLimit(ctx, "llm.call"))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A producer much faster than the queue's workers is refused with
// ErrQueueFull once the queue holds its maximum, and every start it was
// told was accepted runs to completion: nothing accepted is lost, nothing
// refused is written.
func TestOverloadedProducerLosesNothingAccepted(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Queues: []string{"ocr"}, Concurrency: 2})
		ctx := context.Background()
		require.NoError(t, b.client.SetQueue(ctx, "ocr", sdk.QueueSettings{MaxWaiting: 50}))
		wf := sdk.NewWorkflow("ocr.page", 1, func(ctx workflow.Context, _ int) (int, error) {
			return workflow.Step(ctx, "ocr", func(context.Context) (int, error) {
				time.Sleep(5 * time.Millisecond)
				return 1, nil
			}, nil)
		}, &sdk.WorkflowOpts{Queue: "ocr"})
		sdk.Register(b.worker, wf)
		var (
			mu       sync.Mutex
			accepted []*sdk.Run[int]
			refused  int
		)
		// The queue is full before the producers start; the workers start with
		// them and drain it while they push.
		fill := make([]sdk.StartParams, 50)
		for i := range fill {
			fill[i] = sdk.StartEntry(wf, -i, nil)
		}
		filled, err := b.client.StartMany(ctx, fill)
		require.NoError(t, err)
		for _, f := range filled {
			accepted = append(accepted, sdk.RunOf(b.client, wf, f.ID))
		}
		// Full, and nobody drains it yet: the producer is pushed back.
		_, err = sdk.Start(ctx, b.client, wf, -1000, nil)
		require.True(t, errors.Is(err, sdk.ErrQueueFull), "a start into the full queue: %v", err)
		refused++
		// Then the workers drain it while producers push, until the queue
		// has taken wantMore starts beyond the fill (not for a fixed time:
		// a slow machine drains less per second, not less in all).
		const wantMore = 30
		startWorker(t, b.worker)
		produce, stop := context.WithTimeout(ctx, testTimeout)
		defer stop()
		var wg sync.WaitGroup
		for p := range 6 {
			wg.Go(func() {
				for i := 0; produce.Err() == nil; i++ {
					res, err := sdk.Start(ctx, b.client, wf, p*100000+i, nil)
					mu.Lock()
					switch {
					case err == nil:
						accepted = append(accepted, res)
						if len(accepted) >= len(fill)+wantMore {
							stop()
						}
					case errors.Is(err, sdk.ErrQueueFull):
						refused++
					default:
						t.Errorf("start: %v", err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.GreaterOrEqual(t, len(accepted), len(fill)+wantMore, "the queue kept accepting as it drained")
		for _, r := range accepted {
			require.Equal(t, history.StatusCompleted, waitTask(t, b.client, r.ID).Status)
		}
		require.Len(t, enginetest.TaskIDs(t, sdk.ClientStore(b.client)), len(accepted), "a refused start wrote nothing")
		t.Logf("accepted %d, refused %d", len(accepted), refused)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
