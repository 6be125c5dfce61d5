package interpreter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// run runs body as a workflow over b's params.
func (b *testBundle) run(body func(workflow.Context) (any, error)) interpreter.Result {
	return interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		out, err := body(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}, nil)
}

func page(i int) string { return fmt.Sprintf("page-%d", i) }

// Ten futures that finish in reverse order of their Go calls are recorded
// ten times, as each finishes, at positions in call order, each with its
// own output.
func TestGoRecordsEachStepAtItsCallPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 10
	finished := make([]chan struct{}, n+1)
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	close(finished[n])
	res := b.run(func(ctx workflow.Context) (any, error) {
		futures := make([]*workflow.Future[string], n)
		for i := range n {
			futures[i] = workflow.Go(ctx, page(i), func(context.Context) (string, error) {
				<-finished[i+1] // the later one first
				defer close(finished[i])
				return "text of " + page(i), nil
			}, nil)
		}
		var texts []string
		for _, f := range futures {
			text, err := f.Get(ctx)
			if err != nil {
				return nil, err
			}
			texts = append(texts, text)
		}
		return texts, nil
	})
	require.NoError(t, res.Err)
	require.Nil(t, res.Pending, "futures are recorded as they finish, not left for the outcome")
	require.Equal(t, n, res.Executed)
	recorded := b.rec.recorded()
	require.Len(t, recorded, n)
	// Recorded as they finished, so not in call order; but a future's
	// function returns (and lets the one before it go on) just before its
	// record, so two neighbours may record in either order: compare by
	// position.
	slices.SortFunc(recorded, func(a, b history.StepCompletedData) int { return a.Position - b.Position })
	for i, step := range recorded {
		require.Equal(t, i, step.Position)
		require.Equal(t, page(i), step.Name)
		require.JSONEq(t, fmt.Sprintf("%q", "text of "+page(i)), string(step.Output))
	}
}

// A replay over six recorded futures runs only the four others.
func TestGoRunsOnlyTheStepsNotOnRecord(t *testing.T) {
	t.Parallel()
	var steps []history.Step
	for i := range 6 {
		steps = append(steps, recordedStep(t, i, page(i), "text of "+page(i)))
	}
	b := setup(t, steps...)
	var runs [10]atomic.Int32
	res := b.run(func(ctx workflow.Context) (any, error) {
		texts, err := workflow.Map(ctx, "ocr", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, func(_ context.Context, i int) (string, error) {
			runs[i].Add(1)
			return "text of " + page(i), nil
		}, &workflow.MapOpts{Concurrency: 4})
		return texts, err
	})
	// The recorded steps are named page-i, Map calls them all "ocr".
	require.ErrorIs(t, res.Err, workflow.ErrNondeterministic)

	b = setup(t, steps...)
	res = b.run(func(ctx workflow.Context) (any, error) {
		var futures []*workflow.Future[string]
		for i := range 10 {
			futures = append(futures, workflow.Go(ctx, page(i), func(context.Context) (string, error) {
				runs[i].Add(1)
				return "text of " + page(i), nil
			}, nil))
		}
		var texts []string
		for _, f := range futures {
			text, err := f.Get(ctx)
			if err != nil {
				return nil, err
			}
			texts = append(texts, text)
		}
		return texts, nil
	})
	require.NoError(t, res.Err)
	for i := range 10 {
		want := int32(1)
		if i < 6 {
			want = 0
		}
		require.Equal(t, want, runs[i].Load(), "runs of %s", page(i))
	}
	require.Equal(t, 4, res.Executed)
	var positions []int
	for _, step := range b.rec.recorded() {
		positions = append(positions, step.Position)
	}
	require.ElementsMatch(t, []int{6, 7, 8, 9}, positions)
}

// A failed future ends the run with its error and step; the futures
// before it stay recorded, and those still running when the body returns
// run to their end and are recorded too, ahead of the failed one: their
// effects have happened.
func TestGoFailureKeepsTheFinishedSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var done sync.WaitGroup
	done.Add(6)
	boom := errors.New("ocr service unavailable")
	var cancelled atomic.Int32
	failed := make(chan struct{})
	allStarted := make(chan struct{})
	res := b.run(func(ctx workflow.Context) (any, error) {
		var futures []*workflow.Future[string]
		for i := range 10 {
			futures = append(futures, workflow.Go(ctx, page(i), func(ctx context.Context) (string, error) {
				switch {
				case i < 6:
					defer done.Done()
					return "text of " + page(i), nil
				case i == 6:
					done.Wait()
					<-allStarted // so the failure refuses none of the Go calls
					defer close(failed)
					return "", boom
				}
				<-failed // still running when the body returns
				if ctx.Err() != nil {
					cancelled.Add(1)
				}
				return "text of " + page(i), nil
			}, nil))
		}
		close(allStarted)
		for _, f := range futures {
			if _, err := f.Get(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	require.ErrorIs(t, res.Err, boom)
	require.NotNil(t, res.Step)
	require.Equal(t, 6, res.Step.Position)
	require.Zero(t, cancelled.Load(), "the body's return does not cancel the running futures of a failed run")
	var positions []int
	for _, step := range b.rec.recorded() {
		positions = append(positions, step.Position)
	}
	require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 7, 8, 9}, positions)
}

// Map, when an item fails, starts no more items, lets the running ones
// finish and records them (ahead of the failed one), and returns the first
// error in item order. The retry runs only the failed item and those never
// started.
func TestMapFailureRecordsTheRunningItems(t *testing.T) {
	t.Parallel()
	const items, limit = 8, 4
	boom := errors.New("ocr service unavailable")
	var runs [items]atomic.Int32
	var others sync.WaitGroup
	others.Add(limit - 1)
	failed := make(chan struct{})
	ocr := func(fail bool) func(context.Context, int) (string, error) {
		return func(_ context.Context, i int) (string, error) {
			runs[i].Add(1)
			if fail && i == 0 {
				others.Wait() // items 1 to 3 started
				close(failed)
				return "", boom
			}
			if fail {
				others.Done()
				<-failed // running when item 0 fails; done after
			}
			return "text of " + page(i), nil
		}
	}
	body := func(fn func(context.Context, int) (string, error)) func(workflow.Context) (any, error) {
		return func(ctx workflow.Context) (any, error) {
			return workflow.Map(ctx, "ocr", []int{0, 1, 2, 3, 4, 5, 6, 7}, fn, &workflow.MapOpts{Concurrency: limit})
		}
	}
	b := setup(t)
	res := b.run(body(ocr(true)))
	require.ErrorIs(t, res.Err, boom)
	require.Equal(t, 0, res.Step.Position)
	var ahead []history.Step
	for _, done := range b.rec.recorded() {
		ahead = append(ahead, history.Step{Position: done.Position, Name: done.Name, Output: done.Output})
	}
	slices.SortFunc(ahead, func(a, b history.Step) int { return a.Position - b.Position })
	var positions []int
	for _, st := range ahead {
		positions = append(positions, st.Position)
	}
	require.Equal(t, []int{1, 2, 3}, positions, "the running items are recorded; no item starts after the failure")

	b = setup(t)
	b.params.Ahead = ahead
	res = b.run(body(ocr(false)))
	require.NoError(t, res.Err)
	var got []string
	require.NoError(t, json.Unmarshal(res.Output, &got))
	for i, text := range got {
		require.Equal(t, "text of "+page(i), text)
	}
	for i := range items {
		want := int32(1)
		if i == 0 {
			want = 2
		}
		require.Equal(t, want, runs[i].Load(), "runs of item %d", i)
	}
}

// A sequential Step after a future still running is recorded whatever the
// future does; the future is recorded when it finishes.
func TestStepAfterFuturesIsRecordedInPositionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	res := b.run(func(ctx workflow.Context) (any, error) {
		slow := workflow.Go(ctx, "slow", func(context.Context) (int, error) { <-release; return 1, nil }, nil)
		fast, err := workflow.Step(ctx, "fast", func(context.Context) (int, error) { return 2, nil }, nil)
		if err != nil {
			return nil, err
		}
		close(release)
		s, err := slow.Get(ctx)
		return s + fast, err
	})
	require.NoError(t, res.Err)
	require.JSONEq(t, "3", string(res.Output))
	var names []string
	for _, step := range b.rec.recorded() {
		names = append(names, step.Name)
	}
	if res.Pending != nil {
		names = append(names, res.Pending.(history.StepCompletedData).Name)
	}
	require.Equal(t, []string{"slow", "fast"}, names)
}

// workflow.Step from goroutines the workflow started itself fails the run
// as non-deterministic, whether the calls overlap or not, and runs none of
// them.
func TestStepFromAnotherGoroutineIsNondeterministic(t *testing.T) {
	t.Parallel()
	for _, goroutines := range []int{1, 10} {
		t.Run(fmt.Sprint(goroutines), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var ran atomic.Int32
			res := b.run(func(ctx workflow.Context) (any, error) {
				var wg sync.WaitGroup
				for i := range goroutines {
					wg.Go(func() {
						_, _ = workflow.Step(ctx, page(i), func(context.Context) (int, error) { ran.Add(1); return i, nil }, nil)
					})
				}
				wg.Wait()
				return nil, nil
			})
			require.ErrorIs(t, res.Err, workflow.ErrNondeterministic)
			require.ErrorContains(t, res.Err, "workflow.Step called from a goroutine the workflow did not start with workflow.Go; use workflow.Go or workflow.Map")
			require.Zero(t, ran.Load())
			require.Empty(t, b.rec.recorded())
		})
	}
}

// Map returns its outputs in item order and never runs more than
// Concurrency items at once.
func TestMapKeepsItemOrderAndBoundsConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const items, limit = 25, 3
	var inFlight, maxInFlight atomic.Int32
	pages := make([]int, items)
	for i := range pages {
		pages[i] = i
	}
	res := b.run(func(ctx workflow.Context) (any, error) {
		return workflow.Map(ctx, "ocr", pages, func(_ context.Context, i int) (string, error) {
			now := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				seen := maxInFlight.Load()
				if now <= seen || maxInFlight.CompareAndSwap(seen, now) {
					break
				}
			}
			return page(i), nil
		}, &workflow.MapOpts{Concurrency: limit})
	})
	require.NoError(t, res.Err)
	var got []string
	require.NoError(t, json.Unmarshal(res.Output, &got))
	require.Len(t, got, items)
	for i, text := range got {
		require.Equal(t, page(i), text)
	}
	require.LessOrEqual(t, maxInFlight.Load(), int32(limit))
	require.Len(t, b.rec.recorded(), items)
}

// Sleep waits for the futures started before it, so the timer follows
// their records; a future the body never joins and that is still running
// when the body returns is cancelled and not recorded.
func TestSleepWaitsForFuturesAndReturnAbandonsThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	res := b.run(func(ctx workflow.Context) (any, error) {
		workflow.Go(ctx, "slow", func(context.Context) (int, error) { <-release; return 1, nil }, nil)
		close(release)
		return nil, workflow.Sleep(ctx, time.Hour)
	})
	var sleep *interpreter.SleepRequest
	require.ErrorAs(t, res.Err, &sleep)
	require.Equal(t, 1, sleep.Position)
	require.Len(t, b.rec.recorded(), 1)

	b = setup(t)
	var cause error
	res = b.run(func(ctx workflow.Context) (any, error) {
		workflow.Go(ctx, "never joined", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return 0, cause
		}, nil)
		return "done", nil
	})
	require.NoError(t, res.Err, "an abandoned future's error is not the run's")
	require.JSONEq(t, `"done"`, string(res.Output))
	require.Nil(t, res.Pending)
	require.Empty(t, b.rec.recorded())
	require.ErrorContains(t, cause, "the workflow returned before this step finished")
}
