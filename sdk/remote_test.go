package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// remotePolicy classifies remote workers' errors as a Go step's: a bad
// input is permanent, the rest transient.
var remotePolicy = activities.MustPolicy("remote", `error.kind == "BadInput" ? "permanent" : "transient"`)

type page struct {
	N int `json:"page"`
}

type pageText struct {
	Text string `json:"text"`
}

// remoteOCR hands a page per input to the queue ocr and joins the texts
// in a Go step.
var remoteOCR = sdk.NewWorkflow("remote.ocr", 1, func(ctx workflow.Context, pages []int) (string, error) {
	in := make([]page, len(pages))
	for i, n := range pages {
		in[i] = page{N: n}
	}
	texts, err := workflow.MapRemote[page, pageText](ctx, "ocr.page", in, &workflow.RemoteOpts{
		Queue: "ocr", HeartbeatTimeout: time.Second,
		Retry: &activities.RetryPolicy{MaxAttempts: 4, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, Classifier: remotePolicy},
	})
	if err != nil {
		return "", err
	}
	return workflow.Step(ctx, "join", func(context.Context) (string, error) {
		out := ""
		for _, t := range texts {
			out += t.Text + ";"
		}
		return out, nil
	}, nil)
}, nil)

// TestRemoteStepsRunOnceEach: a workflow's parallel remote steps, done by
// "a worker in another language" (this test, through the client's side
// of the protocol): one fails transiently and is dispatched again, one
// is claimed by a worker that vanishes and is claimed again after its
// lease; every step completes once in the history, the vanished claim's
// late answer is refused, and a repeated answer is not an error.
func TestRemoteStepsRunOnceEach(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		sdk.Register(b.worker, remoteOCR)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, remoteOCR, []int{1, 2, 3}, nil)
		require.NoError(t, err)

		var vanished string
		completed := map[int]string{} // page: the claim that completed it
		for len(completed) < 3 {
			claims, err := b.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "ocr", Worker: "py-1", Names: []string{"ocr.page"}, Max: 3, Wait: 5 * time.Second})
			require.NoError(t, err)
			for _, c := range claims {
				var in page
				require.NoError(t, json.Unmarshal(c.Input, &in))
				require.Equal(t, "ocr.page", c.Name)
				require.Equal(t, time.Second, c.HeartbeatTimeout)
				switch {
				case in.N == 2 && c.Attempt == 1:
					require.NoError(t, b.client.FailRemote(ctx, c.Claim, sdk.RemoteFailure{Message: "ocr backend unavailable", Type: "HTTPError",
						Kind: "Unavailable", Status: 503, Attributes: map[string]string{"host": "ocr-1"}}, nil))
					require.NoError(t, b.client.FailRemote(ctx, c.Claim, sdk.RemoteFailure{Message: "again"}, nil), "a repeated failure is not an error")
				case in.N == 3 && c.Attempt == 1:
					vanished = c.Claim // its worker is killed: no heartbeat, no answer
				default:
					_, err := b.client.HeartbeatRemote(ctx, c.Claim, nil)
					require.NoError(t, err)
					out := json.RawMessage(fmt.Sprintf(`{"text":"page %d"}`, in.N))
					require.NoError(t, b.client.CompleteRemote(ctx, c.Claim, out, &sdk.RemoteCallOpts{Ran: 5 * time.Millisecond}))
					require.NoError(t, b.client.CompleteRemote(ctx, c.Claim, out, &sdk.RemoteCallOpts{Ran: 5 * time.Millisecond}), "a repeated completion is not an error")
					completed[in.N] = c.Claim
				}
			}
		}
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "page 1;page 2;page 3;", out)

		require.NotEmpty(t, vanished)
		err = b.client.CompleteRemote(ctx, vanished, json.RawMessage(`{"text":"late"}`), nil)
		require.ErrorIs(t, err, sdk.ErrClaimLost, "the vanished worker's late answer is refused")
		_, err = b.client.HeartbeatRemote(ctx, vanished, nil)
		require.ErrorIs(t, err, sdk.ErrClaimLost)

		events, err := b.client.History(ctx, run.ID)
		require.NoError(t, err)
		done := map[int]int{}
		var failures []history.RemoteStepFailedData
		for _, e := range events {
			switch d := e.Data.(type) {
			case history.RemoteStepCompletedData:
				done[d.Position]++
				require.Equal(t, "py-1", d.Worker)
			case history.RemoteStepFailedData:
				failures = append(failures, d)
			case history.AttemptFailedData:
				require.Equal(t, history.Transient, d.Error.Class, "classified by the step's policy")
				require.Equal(t, "policy:remote", d.Error.ClassifiedBy)
			}
		}
		require.Equal(t, map[int]int{0: 1, 1: 1, 2: 1}, done, "every remote step completes once")
		require.Len(t, failures, 2)
		kinds := map[string]history.RemoteStepFailedData{}
		for _, f := range failures {
			kinds[f.Error.Kind] = f
		}
		require.Equal(t, 503, kinds["Unavailable"].Error.Status)
		require.Equal(t, map[string]string{"host": "ocr-1", "type": "HTTPError"}, kinds["Unavailable"].Error.Attrs)
		require.Contains(t, kinds, "heartbeat_timeout", "the vanished claim failed when its lease ended")
		require.Equal(t, 1, kinds["heartbeat_timeout"].Attempt)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestRemoteStepPermanentFailure: a remote worker's error the step's CEL
// policy classifies as permanent ends the workflow, with the evidence.
func TestRemoteStepPermanentFailure(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		sdk.Register(b.worker, remoteOCR)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, remoteOCR, []int{7}, nil)
		require.NoError(t, err)
		var claims []sdk.RemoteClaim
		for len(claims) == 0 {
			claims, err = b.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "ocr", Worker: "ts-1", Wait: 5 * time.Second})
			require.NoError(t, err)
		}
		require.NoError(t, b.client.FailRemote(ctx, claims[0].Claim, sdk.RemoteFailure{Message: "page is not an image", Kind: "BadInput"}, nil))
		_, err = run.Result(ctx)
		require.Error(t, err)
		info, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Equal(t, "BadInput", info.LastError.Kind)
		require.Equal(t, "policy:remote", info.LastError.ClassifiedBy)
		require.Equal(t, "ocr.page", info.LastError.Step)
	})
}

// TestRemoteOutcomeWhileTheWorkflowRuns: a remote step that completes
// while its workflow's attempt runs a Go step is taken in when the
// workflow awaits it: the attempt hands the task back rather than wait
// for an outcome already there (it once recorded nothing and stalled
// until its lease ended).
func TestRemoteOutcomeWhileTheWorkflowRuns(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		answered := make(chan struct{})
		wf := sdk.NewWorkflow("remote.overlap", 1, func(ctx workflow.Context, _ int) (string, error) {
			f := workflow.GoRemote[string](ctx, "tag", "x", &workflow.RemoteOpts{Queue: "tags"})
			if _, err := workflow.Step(ctx, "slow", func(ctx context.Context) (int, error) {
				select {
				case <-answered:
				case <-ctx.Done():
				}
				return 1, nil
			}, nil); err != nil {
				return "", err
			}
			return f.Get(ctx)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, wf, 0, nil)
		require.NoError(t, err)
		var claims []sdk.RemoteClaim
		for len(claims) == 0 {
			claims, err = b.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "tags", Worker: "w", Wait: 5 * time.Second})
			require.NoError(t, err)
		}
		require.NoError(t, b.client.CompleteRemote(ctx, claims[0].Claim, json.RawMessage(`"tagged"`), nil))
		close(answered)
		out, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "tagged", out)
		events, err := b.client.History(ctx, run.ID)
		require.NoError(t, err)
		for _, e := range events {
			require.NotEqual(t, history.LeaseExpired, e.Type(), "no attempt waited out its lease")
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestRemoteOutcomeAfterCancelIsRefused: a remote step that answers
// after its workflow's cancel is refused; the workflow ends cancelled
// and does not take it in.
func TestRemoteOutcomeAfterCancelIsRefused(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		sdk.Register(b.worker, remoteOCR)
		startWorker(t, b.worker)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		run, err := sdk.Start(ctx, b.client, remoteOCR, []int{1}, nil)
		require.NoError(t, err)
		var claims []sdk.RemoteClaim
		for len(claims) == 0 {
			claims, err = b.client.ClaimRemote(ctx, sdk.RemoteClaimOpts{Queue: "ocr", Worker: "w", Wait: 5 * time.Second})
			require.NoError(t, err)
		}
		require.NoError(t, b.client.Cancel(ctx, run.ID, "not needed"))
		renewal, err := b.client.HeartbeatRemote(ctx, claims[0].Claim, nil)
		if err == nil {
			require.True(t, renewal.CancelRequested, "the worker hears of the cancel")
		}
		err = b.client.CompleteRemote(ctx, claims[0].Claim, json.RawMessage(`{"text":"late"}`), nil)
		require.ErrorIs(t, err, sdk.ErrClaimLost)
		info, err := b.client.Wait(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusCancelled, info.Status)
		events, err := b.client.History(ctx, run.ID)
		require.NoError(t, err)
		for _, e := range events {
			require.NotEqual(t, history.RemoteStepCompleted, e.Type())
		}
	})
}
