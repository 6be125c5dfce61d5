package integration_test

import (
	"context"
	"os"
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

// The crash workflow has three steps. Each step records its execution in
// the executions table before doing anything else, so executions are
// counted across processes, including one that is killed mid-step. The step
// named by block waits until its context ends (or forever, in a process
// that is about to be killed).
const crashType = "crash.pipeline"

var crashSteps = []string{"ocr", "extract", "validate"}

func createExecutionsTable(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "CREATE TABLE "+pgx.Identifier{schema, "executions"}.Sanitize()+
		" (task_id text NOT NULL, step text NOT NULL, worker text NOT NULL)")
	require.NoError(t, err)
}

func newCrashWorkflow(pool *pgxpool.Pool, schema, worker, block string) *sdk.Workflow[string, string] {
	insert := "INSERT INTO " + pgx.Identifier{schema, "executions"}.Sanitize() + " (task_id, step, worker) VALUES ($1, $2, $3)"
	run := func(name string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			info, _ := activities.GetInfo(ctx)
			if _, err := pool.Exec(context.WithoutCancel(ctx), insert, info.TaskID, name, worker); err != nil {
				return "", err
			}
			if name == block {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return name + " done", nil
		}
	}
	return sdk.NewWorkflow(crashType, 1, func(ctx workflow.Context, in string) (string, error) {
		out := in
		for _, name := range crashSteps {
			res, err := workflow.Step(ctx, name, run(name), nil)
			if err != nil {
				return "", err
			}
			out += "|" + res
		}
		return out, nil
	}, nil)
}

// executions returns how many times each step ran for task id, by worker.
func executions(t *testing.T, pool *pgxpool.Pool, schema string, id uuid.UUID) map[string]map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT step, worker, count(*) FROM "+
		pgx.Identifier{schema, "executions"}.Sanitize()+" WHERE task_id = $1 GROUP BY step, worker", id.String())
	require.NoError(t, err)
	out := map[string]map[string]int{}
	for rows.Next() {
		var step, worker string
		var n int
		require.NoError(t, rows.Scan(&step, &worker, &n))
		if out[step] == nil {
			out[step] = map[string]int{}
		}
		out[step][worker] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func crashWorkerConfig(pool *pgxpool.Pool, schema, id string, rescue time.Duration) sdk.WorkerConfig {
	return sdk.WorkerConfig{
		Pool: pool, Schema: schema, WorkerID: id, Concurrency: 4,
		LeaseTTL: time.Second, HeartbeatInterval: 200 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, RescueInterval: rescue,
	}
}

// resumeAfterCrash starts worker B after worker A died holding task id at
// its third step, and checks that B resumes it after the lease expires
// without running steps 1 and 2 again.
func resumeAfterCrash(t *testing.T, pool *pgxpool.Pool, schema string, client *sdk.Client, id uuid.UUID) {
	resumeAfter(t, pool, schema, client, id, history.LeaseExpired)
}

// resumeAfter starts worker B after worker A's attempt of task id ended at
// its third step with the event ended (lease_expired after a crash,
// task_released after a stop), and checks that B resumes it without running
// steps 1 and 2 again.
func resumeAfter(t *testing.T, pool *pgxpool.Pool, schema string, client *sdk.Client, id uuid.UUID, ended history.Type) {
	t.Helper()
	ctx := context.Background()
	b, err := sdk.NewWorker(crashWorkerConfig(pool, schema, "worker-b", 100*time.Millisecond))
	require.NoError(t, err)
	sdk.Register(b, newCrashWorkflow(pool, schema, "worker-b", ""))
	require.NoError(t, b.Start(ctx))
	defer func() { require.NoError(t, b.Stop(ctx)) }()

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := client.Wait(waitCtx, id)
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, info.Status)
	out, err := sdk.Output[string](info)
	require.NoError(t, err)
	require.Equal(t, "doc|ocr done|extract done|validate done", out)
	require.Equal(t, 2, info.Attempt)

	runs := executions(t, pool, schema, id)
	require.Equal(t, map[string]int{"worker-a": 1}, runs["ocr"], "ocr must not run again")
	require.Equal(t, map[string]int{"worker-a": 1}, runs["extract"], "extract must not run again")
	require.Equal(t, map[string]int{"worker-a": 1, "worker-b": 1}, runs["validate"], "validate is re-run by worker B")

	require.Equal(t, []history.Type{
		history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.StepCompleted,
		ended,
		history.AttemptStarted, history.StepCompleted, history.TaskCompleted,
	}, eventTypes(t, client, id))
	enginetest.RequireProjectionsMatch(t, newStore(t, pool, schema))
}

// Cancelling a worker's Start context is a graceful stop, not a crash: the
// step that does not finish within StopTimeout is cancelled and its task
// released (task_released), so another worker resumes it at once instead of
// after the lease.
func TestCancelledWorkerContextReleasesTask(t *testing.T) {
	t.Parallel()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	createExecutionsTable(t, pool, schema)
	client := newClient(t, schema)

	// Worker A runs without a rescuer, and its third step blocks until
	// cancelled, which StopTimeout does.
	workerCtx, cancelWorker := context.WithCancel(context.Background())
	defer cancelWorker()
	cfg := crashWorkerConfig(pool, schema, "worker-a", -1)
	cfg.StopTimeout = 100 * time.Millisecond
	a, err := sdk.NewWorker(cfg)
	require.NoError(t, err)
	sdk.Register(a, newCrashWorkflow(pool, schema, "worker-a", "validate"))
	require.NoError(t, a.Start(workerCtx))

	res, err := client.StartDynamic(context.Background(), sdk.TypeRef{Name: crashType, Version: 1}, "doc", nil)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "steps 1 and 2 recorded", func() bool {
		return countEvents(t, client, res.ID, history.StepCompleted) == 2 &&
			executions(t, pool, schema, res.ID)["validate"]["worker-a"] == 1
	})

	cancelWorker()
	// Stop waits for the stop the cancelled context began (or is that stop,
	// bounded by StopTimeout all the same, which the blocked step outlives).
	if err := a.Stop(context.Background()); err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.Equal(t, history.StatusPending, mustGet(t, client, res.ID).Status, "a stopped worker releases its task")

	resumeAfter(t, pool, schema, client, res.ID, history.TaskReleased)
}

func TestCrashResumeAfterWorkerProcessKilled(t *testing.T) {
	t.Parallel()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	createExecutionsTable(t, pool, schema)
	client := newClient(t, schema)

	res, err := client.StartDynamic(context.Background(), sdk.TypeRef{Name: crashType, Version: 1}, "doc", nil)
	require.NoError(t, err)
	proc := startHelper(t, "crash-worker",
		"CAIRN_HELPER_DATABASE_URL="+enginetest.DatabaseURL(t), "CAIRN_HELPER_SCHEMA="+schema)
	waitFor(t, 30*time.Second, "steps 1 and 2 recorded by the worker process", func() bool {
		return countEvents(t, client, res.ID, history.StepCompleted) == 2 &&
			executions(t, pool, schema, res.ID)["validate"]["worker-a"] == 1
	})

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	require.Equal(t, history.StatusRunning, mustGet(t, client, res.ID).Status)

	resumeAfterCrash(t, pool, schema, client, res.ID)
}

// runCrashWorker is the helper process of TestCrashResumeAfterWorkerProcessKilled:
// worker A, blocking in its third step until it is killed.
func runCrashWorker() error {
	ctx := context.Background()
	schema := os.Getenv("CAIRN_HELPER_SCHEMA")
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_HELPER_DATABASE_URL"))
	if err != nil {
		return err
	}
	w, err := sdk.NewWorker(crashWorkerConfig(pool, schema, "worker-a", -1))
	if err != nil {
		return err
	}
	sdk.Register(w, newCrashWorkflow(pool, schema, "worker-a", "validate"))
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {} // until SIGKILL
}

func mustGet(t *testing.T, c *sdk.Client, id uuid.UUID) *sdk.TaskInfo {
	t.Helper()
	info, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return info
}
