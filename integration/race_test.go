package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// executionLog counts step executions in this process, by task and step.
type executionLog struct {
	mu   sync.Mutex
	runs map[string]int // "task/step" → executions
}

func (l *executionLog) record(ctx context.Context, step string) {
	info, _ := activities.GetInfo(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[info.TaskID+"/"+step]++
}

func TestTwoWorkersRaceOverThousandTasks(t *testing.T) {
	t.Parallel()
	const tasks = 1000
	ctx := context.Background()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	client := newClient(t, schema)
	log := &executionLog{runs: map[string]int{}}
	wf := sdk.NewWorkflow("race.pipeline", 1, func(ctx workflow.Context, n int) (int, error) {
		a, err := workflow.Step(ctx, "first", func(ctx context.Context) (int, error) {
			log.record(ctx, "first")
			return n + 1, nil
		}, nil)
		if err != nil {
			return 0, err
		}
		return workflow.Step(ctx, "second", func(ctx context.Context) (int, error) {
			log.record(ctx, "second")
			return a * 2, nil
		}, nil)
	}, nil)

	var workers []*sdk.Worker
	for i := range 2 {
		w, err := sdk.NewWorker(sdk.WorkerConfig{
			Pool: pool, Schema: schema, WorkerID: fmt.Sprintf("racer-%d", i), Concurrency: 16,
			PollInterval: 20 * time.Millisecond, RescueInterval: time.Second,
		})
		require.NoError(t, err)
		sdk.Register(w, wf)
		require.NoError(t, w.Start(ctx))
		workers = append(workers, w)
	}

	ids := make([]uuid.UUID, tasks)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range tasks {
		g.Go(func() error {
			res, err := sdk.Start(ctx, client, wf, i, nil)
			ids[i] = res.ID
			return err
		})
	}
	require.NoError(t, g.Wait())

	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, id := range ids {
		info, err := client.Wait(waitCtx, id)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, info.Status, "task %d", i)
		out, err := sdk.Output[int](info)
		require.NoError(t, err)
		require.Equal(t, (i+1)*2, out)
	}
	for _, w := range workers {
		require.NoError(t, w.Stop(ctx))
	}

	byTask, err := newStore(t, enginetest.Pool(t), schema).EventList(ctx, store.EventListAll("", ids...))
	require.NoError(t, err)
	claimedBy := map[string]int{}
	for _, id := range ids {
		steps := map[int]int{}
		completed := 0
		for _, e := range byTask[id] {
			switch p := e.Data.(type) {
			case history.StepCompletedData:
				steps[p.Position]++
			case history.TaskCompletedData:
				completed++
			case history.AttemptStartedData:
				claimedBy[p.WorkerID]++
			}
		}
		require.Equal(t, map[int]int{0: 1, 1: 1}, steps, "task %s: one step_completed per step", id)
		require.Equal(t, 1, completed, "task %s: completed exactly once", id)
		key := id.String()
		require.Equal(t, 1, log.runs[key+"/first"], "task %s: first step executed once; history:\n%s", id, describeHistory(byTask[id]))
		require.Equal(t, 1, log.runs[key+"/second"], "task %s: second step executed once; history:\n%s", id, describeHistory(byTask[id]))
	}
	t.Logf("attempts started by worker: %v", claimedBy)
	require.Len(t, claimedBy, 2, "both workers took part")
	require.Equal(t, tasks, enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema)))
}

func describeHistory(events []history.Event) string {
	var b strings.Builder
	for _, e := range events {
		data, _ := history.Encode(e.Data)
		fmt.Fprintf(&b, "%d %s attempt=%d %s\n", e.Seq, e.Type(), e.Attempt, data)
	}
	return b.String()
}
