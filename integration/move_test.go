package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

const (
	moveSchema = "moving"
	// moveTasks are started before the move; each waits for a signal
	// after its first step, so all are in flight when the move comes.
	moveTasks = 1000
)

// moveStepsA counts moveWorkflow's first steps run.
var moveStepsA atomic.Int64

// moveWorkflow is a step, a wait for the "go" signal, and a step.
var moveWorkflow = sdk.NewWorkflow("move.flow", 1, func(ctx workflow.Context, n int) (string, error) {
	if _, err := workflow.Step(ctx, "a", func(context.Context) (int, error) {
		time.Sleep(5 * time.Millisecond)
		moveStepsA.Add(1)
		return n, nil
	}, nil); err != nil {
		return "", err
	}
	v, ok, err := workflow.Receive[string](ctx, "go", time.Hour)
	if err != nil || !ok {
		return "", fmt.Errorf("no signal: %v", err)
	}
	return workflow.Step(ctx, "b", func(context.Context) (string, error) { return fmt.Sprintf("%d:%s", n, v), nil }, nil)
}, nil)

// moveCells opens the two clusters as the cells of placement and returns
// them placed.
func moveCells(t *testing.T, placement *pgstore.Placement) (*sdk.Cells, *pgstore.CellStores) {
	t.Helper()
	opened, err := pgstore.OpenCells(context.Background(), placement, pgstore.CellOptions{Schema: moveSchema, Migrate: true,
		Pool: pgstore.PoolOptions{MaxConns: 8}})
	require.NoError(t, err)
	t.Cleanup(opened.Close)
	cells, err := sdk.NewCells(opened.Stores, placement.Namespaces)
	require.NoError(t, err)
	return cells, opened
}

func moveWorker(t *testing.T, cells *sdk.Cells, namespaces ...string) {
	t.Helper()
	w, err := sdk.NewWorker(sdk.WorkerConfig{Cells: cells, Namespaces: namespaces, Concurrency: 16,
		PollInterval: 100 * time.Millisecond, RescueInterval: time.Second, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	sdk.Register(w, moveWorkflow)
	startWorker(t, w)
}

// TestNamespaceMovesBetweenCellsWhileWorkFlows moves namespace acme from
// cell eu to cell us with 1,000 of its tasks in flight (running their
// first step or waiting for a signal) and a submitter starting more: a
// worker on the old map runs acme and globex in eu, one on the new map
// acme in us from before the move. The move's copy equals eu's histories
// at the fence; eu holds nothing of acme afterwards, and a start there
// on the old map is refused naming us; the submitter, retrying its keys
// on the new map, loses and doubles nothing; every task finishes once in
// us, its projection its history's replay; globex in eu is untouched.
// Then cairn namespace move takes acme back to eu through the CLI.
func TestNamespaceMovesBetweenCellsWhileWorkFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	moveStepsA.Store(0) // the test's own count (with -count, each run's)
	eu, us := startCluster(t), startCluster(t)
	mapFile := func(acme string) (string, *pgstore.Placement) {
		path := filepath.Join(t.TempDir(), "placement-"+acme+".json")
		body := fmt.Sprintf(`{"cells": {"eu": %q, "us": %q}, "namespaces": {"acme": %q, "globex": "eu"}}`,
			eu.url()+"&connect_timeout=2", us.url()+"&connect_timeout=2", acme)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		p, err := pgstore.LoadPlacement(path)
		require.NoError(t, err)
		return path, p
	}
	_, oldMap := mapFile("eu")
	newPath, newMap := mapFile("us")
	oldCells, oldOpened := moveCells(t, oldMap)
	newCells, _ := moveCells(t, newMap)
	moveWorker(t, oldCells, "acme", "globex")
	moveWorker(t, newCells, "acme")
	oldAcme, newAcme := cellClient(t, oldCells, "acme"), cellClient(t, newCells, "acme")
	globex := cellClient(t, oldCells, "globex")

	// globex's tasks in eu finish before, during and after the move.
	var globexIDs []uuid.UUID
	startGlobex := func(n int) {
		for i := range n {
			res, err := globex.StartDynamic(ctx, moveWorkflow, i, nil)
			require.NoError(t, err)
			globexIDs = append(globexIDs, res.ID)
		}
	}
	startGlobex(10)

	// The 1,000 in flight.
	keys := map[string]uuid.UUID{}
	starts := make([]sdk.StartParams, 0, moveTasks)
	for i := range moveTasks {
		starts = append(starts, sdk.StartEntry(moveWorkflow, i, &sdk.StartOpts{IdempotencyKey: fmt.Sprintf("pre-%d", i)}))
	}
	res, err := oldAcme.StartMany(ctx, starts)
	require.NoError(t, err)
	for i, r := range res {
		keys[fmt.Sprintf("pre-%d", i)] = r.ID
	}

	// The submitter: on the old map until the move is over (starts
	// refused meanwhile, as acme moves), then on the new map (the map's
	// rollout), each key retried until acknowledged.
	var mu sync.Mutex
	var stop, moved atomic.Bool
	var refused atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := oldAcme
		for n := 0; !stop.Load(); n++ {
			key := fmt.Sprintf("flow-%d", n)
			for !stop.Load() {
				r, err := client.StartDynamic(ctx, moveWorkflow, moveTasks+n, &sdk.StartOpts{IdempotencyKey: key})
				if err == nil {
					mu.Lock()
					keys[key] = r.ID
					mu.Unlock()
					break
				}
				if strings.Contains(err.Error(), "has moved to cell") {
					refused.Store(err)
				}
				if moved.Load() {
					client = newAcme
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Half of them wait for their signal, others run their first step,
	// the rest wait for a slot: then the move.
	waitFor(t, 2*time.Minute, "half the tasks to wait for their signal", func() bool {
		return moveStepsA.Load() >= int64(moveTasks/2+len(globexIDs))
	})

	// A sender on the old map signals "note" to the waiting tasks while
	// the move runs: a signal acknowledged must be in the task's history
	// in us; one refused (the task gone from eu, or its namespace moved)
	// is the sender's to retry.
	preIDs := make([]uuid.UUID, 0, moveTasks)
	for _, r := range res {
		preIDs = append(preIDs, r.ID)
	}
	notes := map[uuid.UUID][]string{}
	var notesMu sync.Mutex
	notesDone := make(chan struct{})
	var stopNotes atomic.Bool
	go func() {
		defer close(notesDone)
		for i := 0; !stopNotes.Load(); i++ {
			id := preIDs[i%len(preIDs)]
			note := fmt.Sprintf("note-%d", i)
			if _, err := oldAcme.Signal(ctx, id, "note", note, nil); err == nil {
				notesMu.Lock()
				notes[id] = append(notes[id], note)
				notesMu.Unlock()
			}
		}
	}()

	// The move, in Go: eu's histories are read when the copy begins
	// (fenced and drained, nothing of acme changes in eu any more).
	src, dst := oldOpened.Stores["eu"].(*pgstore.Store), oldOpened.Stores["us"].(*pgstore.Store)
	var atCopy map[uuid.UUID][]history.Event
	report, err := pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us",
		Logf: func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			t.Log("move: " + msg)
			if strings.HasPrefix(msg, "copying") {
				atCopy = namespaceHistories(t, src, "acme")
			}
		}})
	require.NoError(t, err)
	moved.Store(true)
	stopNotes.Store(true)
	<-notesDone
	t.Logf("moved %d tasks, %d events; paused %s, drained in %s; rows %v", report.Rows["tasks"], report.Rows["events"],
		report.Paused.Round(time.Millisecond), report.Drained.Round(time.Millisecond), report.Rows)
	require.GreaterOrEqual(t, len(atCopy), moveTasks)
	waiting := 0
	for _, events := range atCopy {
		if slices.ContainsFunc(events, func(e history.Event) bool { return e.Type() == history.WaitStarted }) {
			waiting++
		}
	}
	t.Logf("at the copy: %d tasks, %d waiting for their signal", len(atCopy), waiting)
	require.GreaterOrEqual(t, waiting, moveTasks/4, "a good share of the tasks waited for their signal at the move")
	require.EqualValues(t, len(atCopy), report.Rows["tasks"])
	// The worker in us may have claimed some already: each history there
	// begins with eu's at the copy.
	inUS := namespaceHistories(t, dst, "acme")
	for id, events := range atCopy {
		require.GreaterOrEqual(t, len(inUS[id]), len(events), "task %s", id)
		require.Equal(t, events, inUS[id][:len(events)], "task %s: its history in us begins with eu's at the copy", id)
	}
	requireNoRowsOf(t, eu, "acme")

	// A start on the old map is refused, naming where acme went.
	_, err = oldAcme.StartDynamic(ctx, moveWorkflow, -1, nil)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "namespace acme has moved to cell us")
	startGlobex(10) // eu goes on for globex

	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	<-done
	mu.Lock()
	acked := make(map[uuid.UUID]bool, len(keys))
	for _, id := range keys {
		acked[id] = true
	}
	mu.Unlock()
	require.Len(t, acked, len(keys), "no two keys share a task")
	for id := range acked {
		_, err := newAcme.Signal(ctx, id, "go", "now", nil)
		require.NoError(t, err, "signal task %s", id)
	}
	waitFor(t, 3*time.Minute, "every acme task to finish in us", func() bool {
		var open int
		err := dst.Pool().QueryRow(ctx, "SELECT count(*) FROM "+moveSchema+".tasks WHERE namespace = 'acme' AND finished_at IS NULL").Scan(&open)
		return err == nil && open == 0
	})
	final := namespaceHistories(t, dst, "acme")
	require.Len(t, final, len(acked), "the tasks in us are exactly the acknowledged starts")
	for id, events := range final {
		require.True(t, acked[id], "task %s was never acknowledged", id)
		steps := map[string]int{}
		for _, e := range events {
			switch d := e.Data.(type) {
			case history.StepCompletedData:
				steps[d.Name]++
			case history.LeaseExpiredData:
				t.Fatalf("task %s: a lease expired", id)
			}
		}
		require.Equal(t, history.TaskCompleted, events[len(events)-1].Type(), "task %s", id)
		require.Equal(t, map[string]int{"a": 1, "b": 1}, steps, "task %s: each step recorded once", id)
	}
	require.Len(t, final, enginetest.RequireProjectionsMatch(t, dst))
	acknowledged := 0
	for id, sent := range notes {
		var got []string
		for _, e := range final[id] {
			if d, ok := e.Data.(history.SignalReceivedData); ok && d.Name == "note" {
				var note string
				require.NoError(t, json.Unmarshal(d.Payload, &note))
				got = append(got, note)
			}
		}
		require.Equal(t, sent, got, "task %s: the notes acknowledged on the old map, in order, and no other", id)
		acknowledged += len(sent)
	}
	t.Logf("%d notes acknowledged on the old map during the move, each in its history in us", acknowledged)
	require.Positive(t, acknowledged)
	requireNoRowsOf(t, eu, "acme")
	if err, ok := refused.Load().(error); ok {
		t.Logf("the submitter met the fence: %v", err)
	}
	for _, id := range globexIDs {
		_, err := globex.Signal(ctx, id, "go", "now", nil)
		require.NoError(t, err)
	}
	waitAllDone(t, globex, globexIDs)

	// Back to eu, through the CLI; its fence there is dropped, and a
	// start in eu on the old map works again.
	cmd := exec.Command(cairnBinary(t), "namespace", "move", "acme", "--to", "eu", "--placement", newPath, "--schema", moveSchema)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("moved namespace acme from cell us to cell eu: %d tasks", len(final)))
	requireNoRowsOf(t, us, "acme")
	require.Equal(t, final, namespaceHistories(t, src, "acme"), "the histories came back whole")
	_, err = oldAcme.StartDynamic(ctx, moveWorkflow, -2, nil)
	require.NoError(t, err, "acme starts in eu again")
}

// namespaceHistories reads every history of namespace in s, by task.
func namespaceHistories(t *testing.T, s *pgstore.Store, namespace string) map[uuid.UUID][]history.Event {
	t.Helper()
	ctx := context.Background()
	rows, err := s.Pool().Query(ctx, "SELECT id FROM "+moveSchema+".tasks WHERE namespace = $1", namespace)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	out := map[uuid.UUID][]history.Event{}
	for start := 0; start < len(ids); start += 500 {
		part := ids[start:min(start+500, len(ids))]
		events, err := s.EventList(ctx, store.EventListAll(namespace, part...))
		require.NoError(t, err)
		for id, evs := range events {
			out[id] = evs
		}
	}
	return out
}

// requireNoRowsOf checks that a cluster holds no row of namespace in any
// table of the schema that has one.
func requireNoRowsOf(t *testing.T, cluster *pgCluster, namespace string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cluster.url())
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT table_name::text, column_name::text FROM information_schema.columns
		WHERE table_schema = $1 AND column_name IN ('namespace', 'name') ORDER BY 1`, moveSchema)
	require.NoError(t, err)
	type col struct{ table, column string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		return c, r.Scan(&c.table, &c.column)
	})
	require.NoError(t, err)
	for _, c := range cols {
		if c.column == "name" && c.table != "namespaces" {
			continue
		}
		var n int
		require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.%s WHERE %s = $1", moveSchema, c.table, c.column), namespace).Scan(&n))
		require.Zero(t, n, "%s holds %d rows of %s", c.table, n, namespace)
	}
	var events int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+moveSchema+".events AS e WHERE NOT EXISTS (SELECT 1 FROM "+
		moveSchema+".tasks AS t WHERE t.id = e.task_id)").Scan(&events))
	require.Zero(t, events, "events without their task")
}
