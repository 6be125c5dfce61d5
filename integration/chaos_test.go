package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The chaos test's shape. CAIRN_CHAOS_DURATION (a Go duration) makes the
// run longer, on demand; CI runs the short default.
const (
	chaosSchema      = "chaos"
	chaosWorkers     = 3
	chaosStepFailure = 0.1 // chance a step fails transiently
)

func chaosDuration(t *testing.T) time.Duration {
	if v := os.Getenv("CAIRN_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "CAIRN_CHAOS_DURATION")
		return d
	}
	return 30 * time.Second
}

// chaosWorkflow is three steps; each may fail transiently, and each writes
// its effect to a ledger keyed by the step's idempotency key, counting a
// second run instead of hiding it.
func chaosWorkflow(pool *pgxpool.Pool) *sdk.Workflow[int, string] {
	step := func(name string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond)
			if rand.Float64() < chaosStepFailure {
				return "", activities.Transient(errors.Newf("%s: simulated flake", name))
			}
			info, _ := activities.GetInfo(ctx)
			_, err := pool.Exec(ctx, `INSERT INTO `+chaosSchema+`.chaos_effects (key, count) VALUES ($1, 1)
				ON CONFLICT (key) DO UPDATE SET count = chaos_effects.count + 1`, info.IdempotencyKey)
			if err != nil {
				return "", activities.Transient(err)
			}
			return name + " done", nil
		}
	}
	retry := activities.DefaultRetryPolicy
	retry.MaxAttempts, retry.InitialInterval, retry.MaxInterval = 100, 50*time.Millisecond, time.Second
	return sdk.NewWorkflow("chaos.pipeline", 1, func(ctx workflow.Context, _ int) (string, error) {
		for _, name := range []string{"fetch", "extract", "store"} {
			if _, err := workflow.Step(ctx, name, step(name), nil); err != nil {
				return "", err
			}
		}
		return "ok", nil
	}, &sdk.WorkflowOpts{Retry: &retry})
}

// runChaosWorker is the worker process: it runs until SIGKILL, or until
// SIGTERM and a graceful stop.
func runChaosWorker() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_HELPER_DATABASE_URL"))
	if err != nil {
		return err
	}
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: chaosSchema, WorkerID: os.Getenv("CAIRN_HELPER_WORKER_ID"),
		Concurrency: 8, LeaseTTL: 2 * time.Second, PollInterval: 200 * time.Millisecond, RescueInterval: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	sdk.Register(w, chaosWorkflow(pool))
	if err := w.Start(ctx); err != nil {
		return err
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	<-term
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return w.Stop(stopCtx)
}

// chaosRun is the state of a chaos run.
type chaosRun struct {
	t       *testing.T
	cluster *pgCluster
	pool    *pgxpool.Pool
	client  *sdk.Client

	mu       sync.Mutex
	workers  map[string]*exec.Cmd
	nextID   int
	kills    []chaosKill
	accepted []uuid.UUID
}

// chaosKill is a worker killed, when, and the tasks it was running.
type chaosKill struct {
	worker  string
	at      time.Time
	running []uuid.UUID
}

func (r *chaosRun) startWorker() {
	r.mu.Lock()
	r.nextID++
	id := fmt.Sprintf("chaos-worker-%d", r.nextID)
	r.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_HELPER=chaos-worker", "CAIRN_HELPER_DATABASE_URL="+r.cluster.url(),
		"CAIRN_HELPER_WORKER_ID="+id)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A worker dies with the test binary, even one killed by a timeout.
	dieWithParent(cmd)
	require.NoError(r.t, cmd.Start())
	r.mu.Lock()
	r.workers[id] = cmd
	r.mu.Unlock()
}

// killOne SIGKILLs a random worker and records what it was running.
func (r *chaosRun) killOne(ctx context.Context) {
	r.mu.Lock()
	var id string
	for w := range r.workers {
		id = w
		break
	}
	cmd := r.workers[id]
	delete(r.workers, id)
	r.mu.Unlock()
	at := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var running []uuid.UUID
	rows, err := r.pool.Query(ctx, `SELECT id FROM `+chaosSchema+`.tasks WHERE lease_owner = $1 AND status = 'running'`, id)
	if err == nil {
		running, _ = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	}
	r.mu.Lock()
	r.kills = append(r.kills, chaosKill{worker: id, at: at, running: running})
	r.mu.Unlock()
}

// submit starts tasks until ctx ends, retrying each start (same
// idempotency key) until it is accepted: a start whose answer was lost is
// not doubled.
func (r *chaosRun) submit(ctx context.Context, wf sdk.WorkflowRef) {
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("chaos-%d", i)
		for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			res, err := r.client.StartDynamic(context.Background(), wf, i, &sdk.StartOpts{IdempotencyKey: key})
			if err == nil {
				r.mu.Lock()
				r.accepted = append(r.accepted, res.ID)
				r.mu.Unlock()
				break
			}
			time.Sleep(backoff) // the database is down: try again
		}
		time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
	}
}

// Several worker processes run 3-step workflows with random transient
// failures while a worker is SIGKILLed every few seconds (and a new one
// started), and PostgreSQL itself crashes and restarts once, mid-run. At
// the end every accepted task is completed, once, every step's effect
// happened, and replay equals the projection for every task.
func TestChaos(t *testing.T) {
	t.Parallel()
	duration := chaosDuration(t)
	cluster := startCluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.url())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.Migrate(ctx, pool, chaosSchema)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE `+chaosSchema+`.chaos_effects (key text PRIMARY KEY, count integer NOT NULL)`)
	require.NoError(t, err)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: chaosSchema})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	r := &chaosRun{t: t, cluster: cluster, pool: pool, client: client, workers: map[string]*exec.Cmd{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, cmd := range r.workers {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for range chaosWorkers {
		r.startWorker()
	}
	srv := startServerAt(t, cluster.url(), chaosSchema)
	readiness := watchReadiness(srv)

	runCtx, stopRun := context.WithTimeout(ctx, duration)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Go(func() { r.submit(runCtx, sdk.TypeRef{Name: "chaos.pipeline", Version: 1}) })
	restartAt := time.Now().Add(duration / 2)
	var outage time.Duration
	for tick := time.NewTicker(3 * time.Second); runCtx.Err() == nil; {
		select {
		case <-runCtx.Done():
		case <-tick.C:
			r.killOne(ctx)
			r.startWorker()
			if outage == 0 && time.Now().After(restartAt) {
				down := time.Now()
				require.NoError(t, cluster.crash())
				time.Sleep(2 * time.Second) // down long enough for every process to notice
				require.NoError(t, cluster.start())
				outage = time.Since(down)
			}
		}
	}
	wg.Wait()
	require.NotZero(t, outage, "PostgreSQL was restarted mid-run")

	// Every accepted task finishes, once.
	accepted := r.accepted
	require.NotEmpty(t, accepted)
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range accepted {
		for {
			info, err := client.Get(ctx, id)
			require.NoError(t, err, "accepted task %s is in the database", id)
			if info.Status.Terminal() {
				require.Equal(t, history.StatusCompleted, info.Status, "task %s: %+v", id, info.LastError)
				break
			}
			require.True(t, time.Now().Before(deadline), "task %s still %s", id, info.Status)
			time.Sleep(50 * time.Millisecond)
		}
	}
	var tasks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+chaosSchema+`.tasks`).Scan(&tasks))
	require.Equal(t, len(accepted), tasks, "one task per accepted start, none doubled by a retried start")

	// Every step's effect happened; a second run is counted, not hidden.
	var effects, duplicates int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(count - 1), 0) FROM `+chaosSchema+`.chaos_effects`).
		Scan(&effects, &duplicates))
	require.Equal(t, 3*len(accepted), effects, "each task's three steps had their effect")
	enginetest.RequireProjectionsMatch(t, newStore(t, pool, chaosSchema))

	// How long a killed worker's tasks waited to run again.
	var longest time.Duration
	orphans := 0
	for _, k := range r.kills {
		for _, id := range k.running {
			var again *time.Time
			err := pool.QueryRow(ctx, `SELECT min(at) FROM `+chaosSchema+`.events
				WHERE task_id = $1 AND type = 'attempt_started' AND at > $2`, id, k.at).Scan(&again)
			require.NoError(t, err)
			if again == nil {
				// Its worker's last commit reached the database as it died
				// (PostgreSQL commits what it received): the task finished
				// without running again. It is completed, checked above.
				continue
			}
			orphans++
			longest = max(longest, again.Sub(k.at))
		}
	}
	down, up := readiness.stop()
	require.True(t, down, "/readyz answered not ready while PostgreSQL was down")
	require.True(t, up, "/readyz answered ready again after")
	t.Logf("chaos: %s run, %d tasks accepted and completed, %d workers SIGKILLed (%d running tasks orphaned), "+
		"PostgreSQL crashed and restarted once (down %s), %d duplicate step effects of %d, longest kill-to-running-again %s",
		duration, len(accepted), len(r.kills), orphans, outage.Round(time.Millisecond), duplicates, effects, longest.Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "CHAOS tasks=%d kills=%d orphaned=%d pg_restarts=1 pg_down=%s duplicates=%d effects=%d longest_recovery=%s\n",
		len(accepted), len(r.kills), orphans, outage.Round(time.Millisecond), duplicates, effects, longest.Round(time.Millisecond))

	// The rest stop gracefully. The lock is not held while they stop: a
	// failed check must not leave the cleanup, which takes it, hanging.
	r.mu.Lock()
	rest := r.workers
	r.workers = map[string]*exec.Cmd{}
	r.mu.Unlock()
	for id, cmd := range rest {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			_ = cmd.Process.Kill()
			t.Errorf("worker %s did not stop gracefully: %v", id, err)
		}
	}
}

// readinessWatch polls /readyz and remembers whether it saw not-ready and,
// after that, ready.
type readinessWatch struct {
	stopped  chan struct{}
	done     chan struct{}
	sawDown  atomic.Bool
	sawUpAft atomic.Bool
}

func watchReadiness(srv *apiServer) *readinessWatch {
	w := &readinessWatch{stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		client := &http.Client{Timeout: 3 * time.Second}
		for {
			select {
			case <-w.stopped:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := client.Get(srv.url + "/readyz")
			if err != nil {
				continue
			}
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusServiceUnavailable:
				w.sawDown.Store(true)
			case resp.StatusCode == http.StatusOK && w.sawDown.Load():
				w.sawUpAft.Store(true)
			}
		}
	}()
	return w
}

func (w *readinessWatch) stop() (down, upAfter bool) {
	close(w.stopped)
	<-w.done
	return w.sawDown.Load(), w.sawUpAft.Load()
}
