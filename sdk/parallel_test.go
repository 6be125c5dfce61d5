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
// events at distinct positions, each with its own idempotency key; the
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
			}, workflow.MapOpts{Concurrency: limit})
		})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, pages)
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
		for i, step := range steps {
			require.Equal(t, i, step.Position)
			require.Equal(t, "ocr", step.Name)
			require.JSONEq(t, fmt.Sprintf("%q", fmt.Sprintf("text of page %d", i)), string(step.Output))
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, b.client.Store())
	})
}

// An attempt in which six of ten futures finish and one fails transiently
// (the other three are still running when the workflow returns its error)
// is retried with only the four unfinished steps run again.
func TestParallelStepsRetryOnlyTheUnfinished(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		const pages = 10
		var runs [pages]atomic.Int32
		var firstSix sync.WaitGroup
		firstSix.Add(6)
		allStarted := make(chan struct{}) // closed by the first attempt's body
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
							return "", errors.New("ocr service: 503")
						default:
							<-ctx.Done() // unfinished when the workflow returns
							return "", context.Cause(ctx)
						}
					}
					return fmt.Sprintf("text of page %d", page), nil
				})
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
		}, sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, pages)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "%v", info.LastError)
		require.Equal(t, 2, info.Attempt)
		for page := range pages {
			want := int32(1)
			if page >= 6 {
				want = 2
			}
			require.Equal(t, want, runs[page].Load(), "runs of page %d", page)
		}

		events := taskHistory(t, b.client, run.ID)
		var attempts, positions []int
		for _, e := range events {
			if step, ok := e.Data.(history.StepCompletedData); ok {
				attempts, positions = append(attempts, e.Attempt), append(positions, step.Position)
			}
		}
		require.Equal(t, pageNumbers(pages), positions)
		require.Equal(t, []int{1, 1, 1, 1, 1, 1, 2, 2, 2, 2}, attempts)
		failed := eventsOf[history.AttemptFailedData](events)
		require.Len(t, failed, 1)
		require.Equal(t, 6, failed[0].Error.Position)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, b.client.Store())
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
					})
				})
			}
			wg.Wait()
			return texts, errors.Join(errs...)
		}, sdk.WorkflowOpts{Retry: fastRetry(3), SkipDeadLetter: true})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		run, err := sdk.Start(context.Background(), b.client, wf, 10)
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
		enginetest.RequireProjectionsMatch(t, b.client.Store())
	})
}
