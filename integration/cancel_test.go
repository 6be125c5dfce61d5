package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// stepLog records which steps of which task started, and which were undone.
type stepLog struct {
	mu      sync.Mutex
	started map[string][]int
	undone  map[string][]int
}

func (l *stepLog) start(ctx context.Context, pos int) {
	id := taskOf(ctx)
	l.mu.Lock()
	l.started[id] = append(l.started[id], pos)
	l.mu.Unlock()
}

func (l *stepLog) undo(ctx context.Context, pos int) {
	id := taskOf(ctx)
	l.mu.Lock()
	l.undone[id] = append(l.undone[id], pos)
	l.mu.Unlock()
}

func taskOf(ctx context.Context) string {
	info, _ := activities.GetInfo(ctx)
	return info.TaskID
}

// raceStepOpts: steps 0 and 2 can be undone; step 1 is irreversible.
func raceStepOpts(log *stepLog, pos int) *workflow.StepOpts {
	opts := &workflow.StepOpts{}
	if pos == 1 {
		opts.Irreversible = true
	}
	if pos%2 == 0 {
		opts.Compensate = func(ctx context.Context, _ json.RawMessage) error {
			log.undo(ctx, pos)
			return nil
		}
	}
	return opts
}

// TestCancelRace cancels 300 tasks at random moments while two workers run
// them, and checks each one against its history.
func TestCancelRace(t *testing.T) {
	t.Parallel()
	const tasks = 300
	schema := enginetest.Schema(t)
	pool := enginetest.Pool(t)
	client := newClient(t, schema)
	log := &stepLog{started: map[string][]int{}, undone: map[string][]int{}}
	wf := sdk.NewWorkflow("race.pipeline", 1, func(ctx workflow.Context, seed uint64) (int, error) {
		r := rand.New(rand.NewPCG(seed, 1))
		for pos := range 4 {
			pause := time.Duration(r.IntN(15)) * time.Millisecond
			if _, err := workflow.Step(ctx, fmt.Sprintf("step-%d", pos), func(ctx context.Context) (int, error) {
				log.start(ctx, pos)
				select {
				case <-time.After(pause):
					return pos, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}, raceStepOpts(log, pos)); err != nil {
				return 0, err
			}
		}
		return 4, nil
	}, nil)
	var workers []*sdk.Worker
	for range 2 {
		w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Concurrency: 16, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		sdk.Register(w, wf)
		require.NoError(t, w.Start(context.Background()))
		t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
		workers = append(workers, w)
	}

	ctx := context.Background()
	starts := make([]sdk.StartParams, tasks)
	for i := range starts {
		starts[i] = sdk.StartEntry(wf, uint64(i), nil)
	}
	results, err := client.StartMany(ctx, starts)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var tooLate sync.Map
	for i, res := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread over the run: some before a worker takes the task,
			// some mid-step, some after it finished.
			time.Sleep(time.Duration(rand.IntN(700)) * time.Millisecond)
			err := client.Cancel(ctx, res.ID, fmt.Sprintf("race %d", i))
			if errors.Is(err, sdk.ErrTaskState) {
				tooLate.Store(res.ID, true) // it finished first
				return
			}
			require.NoError(t, err)
		}()
	}
	wg.Wait()

	counts := map[history.Status]int{}
	compensated, neverRan := 0, 0
	for _, res := range results {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		info, err := client.Wait(waitCtx, res.ID)
		cancel()
		require.NoError(t, err)
		counts[info.Status]++
		events, err := client.History(ctx, res.ID)
		require.NoError(t, err)
		checkCancelledHistory(t, res.ID, info, events, log)
		if len(eventsOfType[history.CompensationStartedData](events)) > 0 {
			compensated++
		}
		if len(eventsOfType[history.AttemptStartedData](events)) == 0 {
			neverRan++
		}
		if _, late := tooLate.Load(res.ID); late {
			require.Equal(t, history.StatusCompleted, info.Status)
		}
	}
	for _, w := range workers {
		require.NoError(t, w.Stop(ctx))
	}
	t.Logf("%d tasks: %v; %d compensated, %d cancelled before they ran", tasks, counts, compensated, neverRan)
	require.Equal(t, tasks, counts[history.StatusCompleted]+counts[history.StatusCancelled], "every task ends completed or cancelled")
	require.Positive(t, counts[history.StatusCancelled])
	require.Positive(t, compensated, "some tasks were cancelled mid-run and compensated")
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}

// checkCancelledHistory checks one task of the race against its history and
// the step log: exactly one terminal event, last; a task with
// cancel_requested in its history ends cancelled, never completed; after
// cancel_requested no step starts but the one already in flight; what was
// compensated is every completed compensable step, latest first.
func checkCancelledHistory(t *testing.T, id uuid.UUID, info *sdk.TaskInfo, events []history.Event, log *stepLog) {
	t.Helper()
	key := id.String()
	terminal := 0
	for _, e := range events {
		if statusOf(e.Type()).Terminal() {
			terminal++
		}
	}
	require.Equal(t, 1, terminal, "task %s: one terminal event", id)
	require.Equal(t, info.Status, statusOf(events[len(events)-1].Type()), "task %s", id)

	cancelAt := slices.IndexFunc(events, func(e history.Event) bool { return e.Type() == history.CancelRequested })
	log.mu.Lock()
	started, undone := slices.Clone(log.started[key]), slices.Clone(log.undone[key])
	log.mu.Unlock()
	if cancelAt < 0 {
		require.Equal(t, history.StatusCompleted, info.Status, "task %s: not cancelled", id)
		require.Empty(t, undone)
		return
	}
	recordedBefore := 0
	for _, e := range events[:cancelAt] {
		if e.Type() == history.StepCompleted {
			recordedBefore++
		}
	}
	for _, pos := range started {
		require.LessOrEqual(t, pos, recordedBefore,
			"task %s: step %d started although the cancel was on record before step %d's predecessor (history %s)",
			id, pos, pos, describeTypes(events))
	}
	var completed []int
	for _, e := range events {
		if sc, ok := e.Data.(history.StepCompletedData); ok {
			completed = append(completed, sc.Position)
		}
	}
	// A cancel on record before the terminal event wins, even over the
	// last step finishing as it lands.
	require.Equal(t, history.StatusCancelled, info.Status, "task %s: cancel_requested is on record (history %s)", id, describeTypes(events))
	var wantUndone []int
	for i := len(completed) - 1; i >= 0; i-- {
		if completed[i]%2 == 0 {
			wantUndone = append(wantUndone, completed[i])
		}
	}
	cancelled := eventsOfType[history.TaskCancelledData](events)
	require.Len(t, cancelled, 1)
	require.Equal(t, wantUndone, cancelled[0].Compensated, "task %s: compensated list", id)
	require.Equal(t, wantUndone, undone, "task %s: compensators that ran", id)
}

func statusOf(typ history.Type) history.Status {
	switch typ {
	case history.TaskCompleted:
		return history.StatusCompleted
	case history.TaskCancelled:
		return history.StatusCancelled
	case history.TaskFailed:
		return history.StatusFailed
	case history.TaskDeadLettered:
		return history.StatusDeadLettered
	}
	return history.StatusRunning
}

func describeTypes(events []history.Event) string {
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = string(e.Type())
	}
	return strings.Join(names, ",")
}

func eventsOfType[P history.Payload](events []history.Event) []P {
	var out []P
	for _, e := range events {
		if p, ok := e.Data.(P); ok {
			out = append(out, p)
		}
	}
	return out
}

func TestCLICancel(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	client := newClient(t, c.schema)
	ctx := context.Background()
	res, err := client.StartDynamic(ctx, sdk.TypeRef{Name: "report.build", Version: 1}, "q3", &sdk.StartOpts{Delay: time.Hour})
	require.NoError(t, err)

	out := string(c.run("task", "cancel", res.ID.String(), "--reason", "not needed"))
	require.Contains(t, out, "cancel requested")
	info, err := client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, history.StatusCancelled, info.Status)
	text := string(c.run("task", "history", res.ID.String()))
	require.Contains(t, text, "cancel_requested")
	require.Contains(t, text, "by cli:")
	require.Contains(t, text, "not needed")

	again := string(c.run("task", "cancel", res.ID.String()))
	require.Contains(t, again, "cancel requested", "cancelling a cancelled task again is not an error")
	compOut, err := c.command("task", "compensate", res.ID.String()).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(compOut), "it is cancelled")
	out2, err := c.command("task", "cancel", uuid.Must(uuid.NewV7()).String()).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out2), "not found in namespace default")
}
