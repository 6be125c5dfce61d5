package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// crashKidsBudget is the retry budget of the crashing child type.
const crashKidsBudget = 3

// crashKids are the types of the crashing-children test: a child type
// whose step records its run and then SIGKILLs its own worker process, a
// steady child type, and a parent that starts crash, steady, crash and
// completes with how each ended.
type crashKids struct {
	crash  *sdk.Workflow[int, string]
	steady *sdk.Workflow[int, string]
	parent *sdk.Workflow[int, []string]
}

func newCrashKids(pool *pgxpool.Pool, schema string) crashKids {
	insert := "INSERT INTO " + pgx.Identifier{schema, "executions"}.Sanitize() + " (task_id, step, worker) VALUES ($1, $2, $3)"
	retry := activities.RetryPolicy{MaxAttempts: crashKidsBudget, InitialInterval: 10 * time.Millisecond}
	var k crashKids
	k.crash = sdk.NewWorkflow("kids.crash", 1, func(ctx workflow.Context, _ int) (string, error) {
		return workflow.Step(ctx, "crash", func(ctx context.Context) (string, error) {
			info, _ := activities.GetInfo(ctx)
			if _, err := pool.Exec(ctx, insert, info.TaskID, "crash", fmt.Sprint(info.Attempt)); err != nil {
				return "", err
			}
			self, err := os.FindProcess(os.Getpid())
			if err == nil {
				err = self.Kill() // SIGKILL: the worker dies mid-step, holding its leases
			}
			<-ctx.Done()
			return "", errors.CombineErrors(err, ctx.Err())
		}, nil)
	}, &sdk.WorkflowOpts{Retry: &retry})
	k.steady = sdk.NewWorkflow("kids.steady", 1, func(ctx workflow.Context, _ int) (string, error) {
		return "ok", nil
	}, nil)
	k.parent = sdk.NewWorkflow("kids.parent", 1, func(ctx workflow.Context, _ int) ([]string, error) {
		kids := []*workflow.Child[string]{
			workflow.StartChild(ctx, k.crash, 0, nil), workflow.StartChild(ctx, k.steady, 1, nil), workflow.StartChild(ctx, k.crash, 2, nil),
		}
		out := make([]string, len(kids))
		for i, c := range kids {
			v, err := c.Result(ctx)
			var ce *workflow.ChildError
			switch {
			case errors.As(err, &ce):
				out[i] = string(ce.Status)
			case err != nil:
				return nil, err
			default:
				out[i] = v
			}
		}
		return out, nil
	}, nil)
	return k
}

// runCrashKidsWorker is the helper process of
// TestChaosCrashingChildrenDeadLetterAtTheirBudget: a worker of the
// crashing type alone, running one task at a time, which its first step
// kills (so each attempt runs its step).
func runCrashKidsWorker() error {
	ctx := context.Background()
	schema := os.Getenv("CAIRN_HELPER_SCHEMA")
	pool, err := pgxpool.New(ctx, os.Getenv("CAIRN_HELPER_DATABASE_URL"))
	if err != nil {
		return err
	}
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, WorkerID: os.Getenv("CAIRN_HELPER_WORKER_ID"),
		Concurrency: 1, LeaseTTL: time.Second, HeartbeatInterval: 200 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, RescueInterval: -1})
	if err != nil {
		return err
	}
	sdk.Register(w, newCrashKids(pool, schema).crash)
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {} // until its step kills it
}

// Children whose step SIGKILLs their worker process, every attempt, are
// dead-lettered by the rescuer at their type's budget (3), as a task of
// that type started on its own is, instead of being retried without end;
// their parent, waiting for them, hears of it (child_finished,
// dead_lettered), and completes as its workflow decides. Real worker
// processes, one started after each dies; the parents' worker (this
// process) rescues.
func TestChaosCrashingChildrenDeadLetterAtTheirBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	createExecutionsTable(t, pool, schema)
	client := newClient(t, schema)
	t.Cleanup(client.Close)
	kids := newCrashKids(pool, schema)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, WorkerID: "parents", Concurrency: 4,
		PollInterval: 50 * time.Millisecond, RescueInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	sdk.Register(w, kids.parent)
	sdk.Register(w, kids.steady)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(ctx)) })

	parent, err := sdk.Start(ctx, client, kids.parent, 0, nil)
	require.NoError(t, err)
	alone, err := sdk.Start(ctx, client, kids.crash, 0, nil) // the same type, on its own
	require.NoError(t, err)
	crashing := func() []uuid.UUID {
		ids := []uuid.UUID{alone.ID}
		for _, c := range mustState(t, client, parent.ID).Children {
			if c.TaskType == "kids.crash" {
				ids = append(ids, uuid.MustParse(c.ID))
			}
		}
		return ids
	}

	// One crashing worker at a time; another starts when it dies, until
	// the parent and the lone task have finished.
	deadline := time.Now().Add(2 * time.Minute)
	restarts := 0
	for {
		if mustGet(t, client, parent.ID).Status.Terminal() && mustGet(t, client, alone.ID).Status.Terminal() {
			break
		}
		require.True(t, time.Now().Before(deadline), "the parent is still %s after %d worker deaths", mustGet(t, client, parent.ID).Status, restarts)
		for _, id := range crashing() {
			info := mustGet(t, client, id)
			require.LessOrEqual(t, info.Attempt, crashKidsBudget, "task %s (parent %v) ran past its type's budget", id, info.ParentID)
		}
		proc := startHelper(t, "crash-kids-worker", "CAIRN_HELPER_DATABASE_URL="+enginetest.DatabaseURL(t),
			"CAIRN_HELPER_SCHEMA="+schema, fmt.Sprintf("CAIRN_HELPER_WORKER_ID=crash-kids-%d", restarts))
		exited := make(chan struct{})
		go func(cmd *exec.Cmd) {
			defer close(exited)
			_ = cmd.Wait()
		}(proc)
		select {
		case <-exited:
			restarts++
		case <-time.After(5 * time.Second):
			// Nothing left for it to crash on: stop it and look again.
			_ = proc.Process.Kill()
			<-exited
		}
	}

	ended := map[uuid.UUID]bool{}
	for _, id := range crashing() {
		info := mustGet(t, client, id)
		require.Equal(t, history.StatusDeadLettered, info.Status, "task %s", id)
		require.Equal(t, crashKidsBudget, info.Attempt, "task %s", id)
		require.Equal(t, crashKidsBudget, info.MaxAttempts, "task %s", id)
		events := eventsOfTask(t, client, id)
		dead, ok := events[len(events)-1].Data.(history.TaskDeadLetteredData)
		require.True(t, ok, "task %s ends task_dead_lettered", id)
		require.Equal(t, fmt.Sprintf("lease expired on attempt %d of %d", crashKidsBudget, crashKidsBudget), dead.Reason)
		require.Equal(t, crashKidsBudget, lostAttempts(events), "task %s: every attempt died with its worker", id)
		require.Equal(t, crashKidsBudget, executionsOf(t, pool, schema, id), "task %s: each attempt's step ran, and killed its worker", id)
		ended[id] = true
	}
	require.Len(t, ended, 3, "two children and the lone task")
	require.Equal(t, 3*crashKidsBudget, restarts, "one worker death per attempt")

	done := mustGet(t, client, parent.ID)
	require.Equal(t, history.StatusCompleted, done.Status, "%+v", done.LastError)
	out, err := sdk.Output[[]string](done)
	require.NoError(t, err)
	require.Equal(t, []string{"dead_lettered", "ok", "dead_lettered"}, out)
	var finished []history.ChildFinishedData
	for _, e := range eventsOfTask(t, client, parent.ID) {
		if f, ok := e.Data.(history.ChildFinishedData); ok {
			finished = append(finished, f)
		}
	}
	require.Len(t, finished, 3)
	statuses := map[int]history.Status{}
	for _, f := range finished {
		statuses[f.Position] = f.Status
	}
	require.Equal(t, map[int]history.Status{0: history.StatusDeadLettered, 1: history.StatusCompleted, 2: history.StatusDeadLettered}, statuses)
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
	t.Logf("crashing children: %d worker processes SIGKILLed by their step; each crashing task dead-lettered at attempt %d of %d",
		restarts, crashKidsBudget, crashKidsBudget)
}

func mustState(t *testing.T, c *sdk.Client, id uuid.UUID) history.State {
	t.Helper()
	st, err := history.Replay(eventsOfTask(t, c, id))
	require.NoError(t, err)
	return st
}

func eventsOfTask(t *testing.T, c *sdk.Client, id uuid.UUID) []history.Event {
	t.Helper()
	events, err := c.History(context.Background(), id)
	require.NoError(t, err)
	return events
}

// lostAttempts counts the attempts of events that ended with their lease
// expired.
func lostAttempts(events []history.Event) int {
	n := 0
	for _, e := range events {
		if e.Type() == history.LeaseExpired {
			n++
		}
	}
	return n
}

// executionsOf counts the recorded runs of task id's steps.
func executionsOf(t *testing.T, pool *pgxpool.Pool, schema string, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+
		pgx.Identifier{schema, "executions"}.Sanitize()+" WHERE task_id = $1", id.String()).Scan(&n))
	return n
}
