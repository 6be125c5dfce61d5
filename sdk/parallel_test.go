package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func pageNumbers(n int) []int {
	pages := make([]int, n)
	for i := range pages {
		pages[i] = i
	}
	return pages
}

// maxGauge tracks the most values in flight at once.
type maxGauge struct{ now, max atomic.Int32 }

func (g *maxGauge) enter() {
	now := g.now.Add(1)
	for {
		seen := g.max.Load()
		if now <= seen || g.max.CompareAndSwap(seen, now) {
			return
		}
	}
}

func (g *maxGauge) leave() { g.now.Add(-1) }

// Ten pages OCR'd concurrently with workflow.Map are ten step_completed
// events at distinct positions (recorded as each finishes), each with its own idempotency key; the
// outputs come back in page order and no more than Concurrency run at once.
func TestMapRecordsEachParallelStep(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		const pages, limit = 10, 4
		var gauge maxGauge
		var keys sync.Map // idempotency key → page
		wf := sdk.NewWorkflow("doc.ocr", 1, func(ctx workflow.Context, n int) ([]string, error) {
			return workflow.Map(ctx, "ocr", pageNumbers(n), func(ctx context.Context, page int) (string, error) {
				gauge.enter()
				defer gauge.leave()
				info, ok := activities.GetInfo(ctx)
				if !ok {
					return "", errors.New("no activity info")
				}
				if _, dup := keys.LoadOrStore(info.IdempotencyKey, page); dup {
					return "", activities.Permanent(errors.Newf("idempotency key %s reused", info.IdempotencyKey))
				}
				return fmt.Sprintf("text of page %d", page), nil
			}, &workflow.MapOpts{Concurrency: limit})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, pages, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "%v", info.LastError)
		out, err := sdk.Output[[]string](info)
		require.NoError(t, err)
		require.Len(t, out, pages)
		for i, text := range out {
			require.Equal(t, fmt.Sprintf("text of page %d", i), text)
		}
		require.LessOrEqual(t, gauge.max.Load(), int32(limit))

		steps := eventsOf[history.StepCompletedData](taskHistory(t, b.client, run.ID))
		require.Len(t, steps, pages)
		seen := map[int]bool{}
		for _, step := range steps { // in the order they finished
			i := step.Position
			require.False(t, seen[i], "position %d recorded twice", i)
			seen[i] = true
			require.Equal(t, "ocr", step.Name)
			require.JSONEq(t, fmt.Sprintf("%q", fmt.Sprintf("text of page %d", i)), string(step.Output))
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// An attempt in which six of ten futures finish and one fails transiently
// (the other three are still running when the workflow returns its error,
// and finish after) is retried with only the failed step run again: the
// three are recorded, ahead of it, before the attempt ends.
func TestParallelStepsRetryOnlyTheUnfinished(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		const pages = 10
		var runs [pages]atomic.Int32
		var firstSix sync.WaitGroup
		firstSix.Add(6)
		allStarted := make(chan struct{}) // closed by the first attempt's body
		pageFailed := make(chan struct{}) // closed by page 6 as it fails
		wf := sdk.NewWorkflow("doc.ocr", 1, func(ctx workflow.Context, n int) ([]string, error) {
			futures := make([]*workflow.Future[string], n)
			for page := range n {
				futures[page] = workflow.Go(ctx, fmt.Sprintf("ocr page %d", page), func(ctx context.Context) (string, error) {
					runs[page].Add(1)
					info, _ := activities.GetInfo(ctx)
					if info.Attempt == 1 {
						switch {
						case page < 6:
							defer firstSix.Done()
						case page == 6:
							firstSix.Wait()
							<-allStarted // so the failure refuses none of the Go calls
							defer close(pageFailed)
							return "", errors.New("ocr service: 503")
						default:
							<-pageFailed // unfinished when the workflow returns
							if ctx.Err() != nil {
								return "", context.Cause(ctx)
							}
						}
					}
					return fmt.Sprintf("text of page %d", page), nil
				}, nil)
			}
			if ctx.Attempt() == 1 {
				close(allStarted)
			}
			texts := make([]string, n)
			for page, f := range futures {
				text, err := f.Get(ctx)
				if err != nil {
					return nil, err
				}
				texts[page] = text
			}
			return texts, nil
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, pages, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "%v", info.LastError)
		require.Equal(t, 2, info.Attempt)
		for page := range pages {
			want := int32(1)
			if page == 6 {
				want = 2
			}
			require.Equal(t, want, runs[page].Load(), "runs of page %d", page)
		}

		events := taskHistory(t, b.client, run.ID)
		byAttempt := map[int][]int{}
		for _, e := range events {
			if step, ok := e.Data.(history.StepCompletedData); ok {
				byAttempt[e.Attempt] = append(byAttempt[e.Attempt], step.Position)
			}
		}
		require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 7, 8, 9}, byAttempt[1])
		require.Equal(t, []int{6}, byAttempt[2])
		failed := eventsOf[history.AttemptFailedData](events)
		require.Len(t, failed, 1)
		require.Equal(t, 6, failed[0].Error.Position)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// When one item of a Map fails, the items still running finish and are
// recorded before the attempt ends, so the retry runs only the failed
// item: their effects are not done twice. (The chaos runs found Map's
// abandoned items to be 53-75 % of all duplicated effects.)
func TestMapFailureKeepsTheRunningItems(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		const items = 6
		var effects [items]atomic.Int32
		var others sync.WaitGroup
		others.Add(items - 1)
		failed := make(chan struct{}) // closed by item 0 as it fails
		wf := sdk.NewWorkflow("doc.embed", 1, func(ctx workflow.Context, n int) ([]string, error) {
			return workflow.Map(ctx, "embed", pageNumbers(n), func(ctx context.Context, item int) (string, error) {
				effects[item].Add(1)
				info, _ := activities.GetInfo(ctx)
				if info.Attempt == 1 {
					if item == 0 {
						others.Wait() // every item started before the failure
						defer close(failed)
						return "", errors.New("embedding service: 503")
					}
					others.Done()
					<-failed // still running when item 0 fails; done shortly after
				}
				return fmt.Sprintf("vector %d", item), nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, items, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "%v", info.LastError)
		require.Equal(t, 2, info.Attempt)
		out, err := sdk.Output[[]string](info)
		require.NoError(t, err)
		for i, v := range out {
			require.Equal(t, fmt.Sprintf("vector %d", i), v)
		}
		for item := range items {
			want := int32(1)
			if item == 0 {
				want = 2
			}
			require.Equal(t, want, effects[item].Load(), "effects of item %d", item)
		}

		events := taskHistory(t, b.client, run.ID)
		byAttempt := map[int][]int{}
		for _, e := range events {
			if step, ok := e.Data.(history.StepCompletedData); ok {
				byAttempt[e.Attempt] = append(byAttempt[e.Attempt], step.Position)
			}
		}
		require.ElementsMatch(t, []int{1, 2, 3, 4, 5}, byAttempt[1], "the running items are recorded in the failed attempt")
		require.Equal(t, []int{0}, byAttempt[2])
		failedAt := eventsOf[history.AttemptFailedData](events)
		require.Len(t, failedAt, 1)
		require.Equal(t, 0, failedAt[0].Error.Position)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Items of a Map recorded ahead of an item that failed for good are
// compensated like any completed step, latest position first.
func TestMapItemsRecordedAheadOfAFailureAreCompensated(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var e effects
		var others sync.WaitGroup
		others.Add(3)
		failed := make(chan struct{})
		wf := sdk.NewWorkflow("doc.reserve", 1, func(ctx workflow.Context, n int) ([]string, error) {
			return workflow.Map(ctx, "reserve", pageNumbers(n), func(ctx context.Context, item int) (string, error) {
				if item == 0 {
					others.Wait() // every item started before the failure
					defer close(failed)
					return "", activities.Permanent(errors.New("no such seat"))
				}
				others.Done()
				<-failed
				e.add(fmt.Sprintf("reserve %d", item))
				return fmt.Sprintf("seat %d", item), nil
			}, &workflow.MapOpts{Step: workflow.StepOpts{Compensate: workflow.Compensate(func(_ context.Context, seat string) error {
				e.add("release " + seat)
				return nil
			})}})
		}, &sdk.WorkflowOpts{SkipDeadLetter: true})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, 4, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusFailed, info.Status)
		events := taskHistory(t, b.client, run.ID)
		require.Equal(t, []int{3, 2, 1}, eventsOf[history.TaskFailedData](events)[0].Compensated)
		require.ElementsMatch(t, []string{"reserve 1", "reserve 2", "reserve 3"}, e.all()[:3])
		require.Equal(t, []string{"release seat 3", "release seat 2", "release seat 1"}, e.all()[3:])
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// workflow.Step called from goroutines the workflow started itself (the
// outside user's OCR fan-out) fails the task as non-deterministic instead
// of recording one step for ten.
func TestStepFromUnmanagedGoroutineFailsTheTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var ran atomic.Int32
		wf := sdk.NewWorkflow("doc.ocr", 1, func(ctx workflow.Context, n int) ([]string, error) {
			texts := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for page := range n {
				wg.Go(func() {
					texts[page], errs[page] = workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
						ran.Add(1)
						return fmt.Sprintf("text of page %d", page), nil
					}, nil)
				})
			}
			wg.Wait()
			return texts, errors.Join(errs...)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3), SkipDeadLetter: true})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, 10, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)

		require.Equal(t, history.StatusFailed, info.Status)
		require.Equal(t, 1, info.Attempt, "non-determinism is not retried")
		require.Equal(t, "nondeterminism", info.LastError.Kind)
		require.Contains(t, info.LastError.Message,
			"workflow.Step called from a goroutine the workflow did not start with workflow.Go; use workflow.Go or workflow.Map")
		require.Zero(t, ran.Load())
		require.Empty(t, eventsOf[history.StepCompletedData](taskHistory(t, b.client, run.ID)))
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
