package integration_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The leader-kill scenario: a worker process that holds the rescuer's
// leader lease and some tasks is killed (SIGKILL); another worker, which
// does not lead, must run those tasks again within about their lease TTL,
// without waiting for the dead leader's lease (three rescue intervals) to
// pass on.
const (
	rescueType = "rescue.block"
	// rescueTasks is how many tasks the leader holds when it is killed.
	rescueTasks = 4
)

// newRescueWorkflow returns the workflow of the scenario: one step, which
// in the leader blocks until the process dies, and in the survivor calls
// ran with the task's id and attempt and returns.
func newRescueWorkflow(ran func(id uuid.UUID, attempt int)) *sdk.Workflow[string, string] {
	return sdk.NewWorkflow(rescueType, 1, func(ctx workflow.Context, in string) (string, error) {
		return workflow.Step(ctx, "work", func(ctx context.Context) (string, error) {
			if ran == nil {
				<-ctx.Done() // the leader: until killed
				return "", ctx.Err()
			}
			info, _ := activities.GetInfo(ctx)
			ran(uuid.MustParse(info.TaskID), info.Attempt)
			return in, nil
		}, nil)
	}, nil)
}

func rescueWorkerConfig(pool *pgxpool.Pool, schema, id string, ttl, rescue time.Duration) sdk.WorkerConfig {
	return sdk.WorkerConfig{Pool: pool, Schema: schema, WorkerID: id, Concurrency: 2 * rescueTasks,
		LeaseTTL: ttl, RescueInterval: rescue}
}

// runRescueLeader is the helper process "rescue-leader": a worker that
// blocks in every step until it is killed.
func runRescueLeader() error {
	ctx := context.Background()
	ttl, err := time.ParseDuration(os.Getenv("CAIRN_HELPER_LEASE_TTL"))
	if err != nil {
		return err
	}
	rescue, err := time.ParseDuration(os.Getenv("CAIRN_HELPER_RESCUE_INTERVAL"))
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_HELPER_DATABASE_URL"))
	if err != nil {
		return err
	}
	w, err := sdk.NewWorker(rescueWorkerConfig(pool, os.Getenv("CAIRN_HELPER_SCHEMA"), "leader", ttl, rescue))
	if err != nil {
		return err
	}
	sdk.Register(w, newRescueWorkflow(nil))
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {} // until SIGKILL
}

// leaderKill is one run of the scenario's outcome.
type leaderKill struct {
	// allBack is the time from the kill until the last of the tasks ran
	// again (its step started in the survivor); firstBack until the first.
	allBack, firstBack time.Duration
	// leaderAfter is who held the leader lease when the last task ran
	// again.
	leaderAfter string
}

// runLeaderKill runs the scenario once in a schema of its own, with the
// given task lease TTL and rescue interval in both workers (0: the SDK's
// default).
func runLeaderKill(tb testing.TB, ttl, rescue time.Duration) leaderKill {
	tb.Helper()
	ctx := context.Background()
	pool := enginetest.Pool(tb)
	schema := enginetest.Schema(tb)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	leaders := pgx.Identifier{schema, "leaders"}.Sanitize()
	tasks := pgx.Identifier{schema, "tasks"}.Sanitize()

	ids := make([]uuid.UUID, rescueTasks)
	for i := range ids {
		run, err := sdk.Start(ctx, client, newRescueWorkflow(nil), "doc "+strconv.Itoa(i), nil)
		require.NoError(tb, err)
		ids[i] = run.ID
	}
	proc := startHelper(tb, "rescue-leader",
		"CAIRN_HELPER_DATABASE_URL="+enginetest.DatabaseURL(tb), "CAIRN_HELPER_SCHEMA="+schema,
		"CAIRN_HELPER_LEASE_TTL="+ttl.String(), "CAIRN_HELPER_RESCUE_INTERVAL="+rescue.String())
	leaderOf := func() string {
		var owner string
		err := pool.QueryRow(ctx, "SELECT coalesce((SELECT owner FROM "+leaders+" WHERE name = 'rescuer'), '')").Scan(&owner)
		require.NoError(tb, err)
		return owner
	}
	waitFor(tb, 30*time.Second, "the worker process to lead and hold every task", func() bool {
		var held int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tasks+" WHERE status = 'running' AND lease_owner = 'leader'").Scan(&held)
		require.NoError(tb, err)
		return held == rescueTasks && leaderOf() == "leader"
	})

	// The survivor starts once the other leads, so it does not.
	var mu sync.Mutex
	back := map[uuid.UUID]time.Time{}
	allBack := make(chan struct{})
	survivor, err := sdk.NewWorker(rescueWorkerConfig(pool, schema, "survivor", ttl, rescue))
	require.NoError(tb, err)
	sdk.Register(survivor, newRescueWorkflow(func(id uuid.UUID, attempt int) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := back[id]; !seen && attempt == 2 {
			back[id] = time.Now()
			if len(back) == rescueTasks {
				close(allBack)
			}
		}
	}))
	require.NoError(tb, survivor.Start(ctx))
	tb.Cleanup(func() { _ = survivor.Stop(context.Background()) })

	killed := time.Now()
	require.NoError(tb, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	select {
	case <-allBack:
	case <-time.After(2*time.Minute + 3*rescue):
		tb.Fatalf("the killed leader's tasks did not run again")
	}
	out := leaderKill{leaderAfter: leaderOf()}
	mu.Lock()
	times := make([]time.Time, 0, len(back))
	for _, at := range back {
		times = append(times, at)
	}
	mu.Unlock()
	out.firstBack, out.allBack = slices.MinFunc(times, time.Time.Compare).Sub(killed), slices.MaxFunc(times, time.Time.Compare).Sub(killed)

	for _, id := range ids {
		info, err := client.Wait(ctx, id)
		require.NoError(tb, err)
		require.Equal(tb, history.StatusCompleted, info.Status)
		require.Equal(tb, []history.Type{history.TaskScheduled, history.AttemptStarted, history.LeaseExpired,
			history.AttemptStarted, history.StepCompleted, history.TaskCompleted}, eventTypes(tb, client, id))
	}
	require.NoError(tb, survivor.Stop(ctx))
	enginetest.RequireProjectionsMatch(tb, newStore(tb, pool, schema))
	return out
}

// TestKilledLeadersTasksAreRescuedWithoutLeadership kills the worker
// process that leads while it holds tasks: the other worker runs them
// again once their leases expire, while the dead process's leader lease
// (three rescue intervals of 5s) still runs. Before, only the leader
// rescued, so they waited for that lease to pass on first.
func TestKilledLeadersTasksAreRescuedWithoutLeadership(t *testing.T) {
	t.Parallel()
	got := runLeaderKill(t, time.Second, 5*time.Second)
	t.Logf("kill → first task running again %s, all %d %s", got.firstBack, rescueTasks, got.allBack)
	require.Equal(t, "leader", got.leaderAfter, "the tasks ran again before the dead leader's lease ran out")
}

// BenchmarkRescueAfterLeaderKill measures the time from a SIGKILL of the
// leading worker process, holding rescueTasks tasks under a 5s lease, to
// the last of them running again in another worker, both workers with
// the SDK's default rescue interval. Run it with -benchtime=20x for 20
// kills; it reports the median and the largest.
//
//	go test ./integration -run '^$' -bench RescueAfterLeaderKill -benchtime=20x
func BenchmarkRescueAfterLeaderKill(b *testing.B) {
	const ttl = 5 * time.Second
	var runs []time.Duration
	for b.Loop() {
		got := runLeaderKill(b, ttl, 0)
		b.Logf("run %d: kill → first back %s, all back %s (lease TTL %s), leader after: %q",
			len(runs)+1, got.firstBack, got.allBack, ttl, got.leaderAfter)
		runs = append(runs, got.allBack)
	}
	slices.Sort(runs)
	b.ReportMetric(runs[len(runs)/2].Seconds(), "p50-s")
	b.ReportMetric(runs[len(runs)-1].Seconds(), "max-s")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d kills, lease TTL %s: kill → all tasks running again p50 %s, max %s", len(runs), ttl,
		runs[len(runs)/2].Round(time.Millisecond), runs[len(runs)-1].Round(time.Millisecond))
}
