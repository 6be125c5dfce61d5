package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// llmWorkflow is a workflow whose one step streams n chunks to "tokens",
// the first attempt failing after failAfter of them (0: none fails), and
// whose body reports progress around it.
func llmWorkflow(name string, n, failAfter int) (*sdk.Workflow[string, int], *atomic.Int32) {
	var attempts atomic.Int32
	retry := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, Multiplier: 1, MaxInterval: time.Millisecond}
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, prompt string) (int, error) {
		if err := workflow.Progress(ctx, 0, 1, "thinking"); err != nil {
			return 0, err
		}
		out, err := workflow.Step(ctx, "answer", func(ctx context.Context) (int, error) {
			attempt := attempts.Add(1)
			for i := range n {
				if attempt == 1 && failAfter > 0 && i == failAfter {
					return 0, errors.New("model overloaded")
				}
				if err := activities.Stream(ctx, "tokens", fmt.Sprintf("t%d ", i)); err != nil {
					return 0, err
				}
			}
			return n, nil
		}, nil)
		if err != nil {
			return 0, err
		}
		return out, workflow.Progress(ctx, 1, 1, "done")
	}, &sdk.WorkflowOpts{Retry: &retry}), &attempts
}

// transcript is what a reader that shows chunks shows: chunks appended,
// a rewind dropping its attempt's.
type transcript struct {
	tokens   []sdk.StreamItem
	progress []string
	rewinds  int
	ends     int
	seqs     []int64
	statuses []history.Status
}

func (tr *transcript) add(t *testing.T, it sdk.StreamItem) {
	t.Helper()
	if it.Seq > 0 {
		if n := len(tr.seqs); n > 0 {
			require.Equal(t, tr.seqs[n-1]+1, it.Seq, "entries in order, each once")
		}
		tr.seqs = append(tr.seqs, it.Seq)
	}
	switch it.Kind {
	case sdk.StreamChunk:
		if it.Stream == activities.ProgressStream {
			tr.progress = append(tr.progress, string(it.Data))
			return
		}
		tr.tokens = append(tr.tokens, it)
	case sdk.StreamRewind:
		tr.rewinds++
		kept := tr.tokens[:0]
		for _, c := range tr.tokens {
			if c.Attempt != it.Attempt || c.Position != it.Position || c.Stream != it.Stream {
				kept = append(kept, c)
			}
		}
		tr.tokens = kept
	case sdk.StreamEnd:
		tr.ends++
	case sdk.StreamStatus:
		tr.statuses = append(tr.statuses, it.Status)
	}
}

// requireAnswer checks the transcript shows the n chunks of the step's
// last attempt, in order.
func (tr *transcript) requireAnswer(t *testing.T, n, attempt int) {
	t.Helper()
	require.Len(t, tr.tokens, n)
	for i, c := range tr.tokens {
		require.Equal(t, fmt.Sprintf("t%d ", i), c.Text())
		require.Equal(t, attempt, c.Attempt)
	}
	require.NotEmpty(t, tr.statuses)
	require.Equal(t, history.StatusCompleted, tr.statuses[len(tr.statuses)-1], "the last item is the finished status")
}

func readAll(t *testing.T, c *sdk.Client, id uuid.UUID, from int64) *transcript {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	tr := &transcript{}
	for it, err := range c.Stream(ctx, id, from, nil) {
		require.NoError(t, err)
		tr.add(t, it)
	}
	return tr
}

func TestStreamRewindsAFailedAttempt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf, attempts := llmWorkflow("llm.answer", 1000, 500)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, "why?", nil)
		require.NoError(t, err)

		// A reader from before the first chunk, reading as they come.
		live := make(chan *transcript, 1)
		go func() { live <- readAll(t, b.client, run.ID, 0) }()
		startWorker(t, b.worker)
		got := <-live
		require.Equal(t, int32(2), attempts.Load())
		got.requireAnswer(t, 1000, 2)
		require.Equal(t, 1, got.rewinds, "the failed attempt's chunks are rewound once")
		require.Equal(t, 3, got.ends, "the step's stream ends, and the body's in each attempt")
		// The body's progress before the step is written by each attempt
		// that runs past the history: the retry's too.
		require.Len(t, got.progress, 3)

		// A reader after the fact reads the same; one resuming from a seq
		// reads the rest.
		again := readAll(t, b.client, run.ID, 0)
		require.Equal(t, got.seqs, again.seqs)
		again.requireAnswer(t, 1000, 2)
		rest := readAll(t, b.client, run.ID, got.seqs[700])
		require.Equal(t, got.seqs[701:], rest.seqs)

		// The history holds how the streams ended, not the chunks.
		events := taskHistory(t, b.client, run.ID)
		closed := eventsOf[history.StreamClosedData](events)
		require.Len(t, closed, 4)
		require.Equal(t, history.StreamClosedData{Name: "tokens", Position: 0, Chunks: 500, Bytes: closed[1].Bytes, Digest: closed[1].Digest,
			Outcome: history.StreamRewound}, closed[1])
		require.Equal(t, activities.ProgressStream, closed[0].Name)
		require.Equal(t, -1, closed[0].Position)
		require.Equal(t, "tokens", closed[2].Name)
		require.EqualValues(t, 1000, closed[2].Chunks)
		require.Equal(t, history.StreamCompleted, closed[2].Outcome)
		require.Equal(t, activities.ProgressStream, closed[3].Name)
		require.Less(t, len(events), 20)

		var ids []uuid.UUID
		for it, err := range run.Stream(ctx, nil) {
			require.NoError(t, err)
			if it.Kind == sdk.StreamStatus {
				ids = append(ids, run.ID)
			}
		}
		require.NotEmpty(t, ids, "Run.Stream reads the run's")
	})
}

// A worker that dies mid-stream writes nothing more; the next attempt's
// first write rewinds the chunks it left, before its own.
func TestStreamRewindsALostAttempt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{RescueInterval: 100 * time.Millisecond})
		wf := sdk.NewWorkflow("llm.lost", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "answer", func(ctx context.Context) (int, error) {
				info, _ := activities.GetInfo(ctx)
				for i := range n {
					if err := activities.Stream(ctx, "tokens", fmt.Sprintf("t%d ", i)); err != nil {
						return 0, err
					}
				}
				if info.Attempt == 1 {
					<-ctx.Done() // the worker dies here
					return 0, ctx.Err()
				}
				return n, nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		crasher := b.newWorker(t, sdk.WorkerConfig{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1})
		sdk.Register(crasher, wf)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, 5, nil)
		require.NoError(t, err)
		items := make(chan sdk.StreamItem, 100)
		go func() {
			defer close(items)
			for it, err := range b.client.Stream(ctx, run.ID, 0, nil) {
				if err != nil {
					return
				}
				items <- it
			}
		}()
		startWorker(t, crasher)
		tr := &transcript{}
		for len(tr.tokens) < 5 {
			tr.add(t, <-items)
		}
		sdk.AbandonWorker(crasher)
		stopWorker(t, crasher)
		startWorker(t, b.worker)
		for it := range items {
			tr.add(t, it)
		}
		tr.requireAnswer(t, 5, 2)
		require.Equal(t, 1, tr.rewinds, "the lost attempt's chunks rewound")
		require.Len(t, tr.seqs, 5+1+5+1)
	})
}
