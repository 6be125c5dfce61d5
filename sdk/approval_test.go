package sdk_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// approvalResult is what one workflow.AwaitApproval returned.
type approvalResult struct {
	Decision  workflow.Decision `json:"decision"`
	OK        bool              `json:"ok"`
	Malformed bool              `json:"malformed"`
}

// awaitApproval is a workflow that awaits the approval "approve" for
// timeout and returns what it got.
func awaitApproval(typ string, timeout time.Duration) *sdk.Workflow[struct{}, approvalResult] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, _ struct{}) (approvalResult, error) {
		d, ok, err := workflow.AwaitApproval(ctx, "approve", timeout)
		if errors.Is(err, workflow.ErrMalformedDecision) {
			return approvalResult{OK: ok, Malformed: true}, nil
		}
		if err != nil {
			return approvalResult{}, err
		}
		return approvalResult{Decision: d, OK: ok}, nil
	}, nil)
}

func TestAwaitApproval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		payload any
		opts    sdk.SignalOpts
		want    approvalResult
	}{
		{"approve", workflow.Decision{Approved: true, Comment: "looks good"}, sdk.SignalOpts{Sender: "alice"},
			approvalResult{Decision: workflow.Decision{Approved: true, Comment: "looks good", By: "alice"}, OK: true}},
		// The sender, not what the payload claims.
		{"reject", json.RawMessage(`{"approved":false,"comment":"no","by":"bob"}`), sdk.SignalOpts{Sender: "api"},
			approvalResult{Decision: workflow.Decision{Approved: false, Comment: "no", By: "api"}, OK: true}},
		{"malformed", json.RawMessage(`{"comment":"which?"}`), sdk.SignalOpts{},
			approvalResult{OK: true, Malformed: true}},
		{"not-an-object", "yes", sdk.SignalOpts{}, approvalResult{OK: true, Malformed: true}},
		{"no-payload", nil, sdk.SignalOpts{}, approvalResult{OK: true, Malformed: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			onEachStore(t, func(t *testing.T, setup setupFunc) {
				b := setup(t, sdk.WorkerConfig{})
				wf := awaitApproval("approval."+c.name, time.Hour)
				sdk.Register(b.worker, wf)
				ctx := context.Background()
				run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
				require.NoError(t, err)
				startWorker(t, b.worker)
				waitForEvent(t, b.client, run.ID, history.WaitStarted)
				_, err = b.client.Signal(ctx, run.ID, "approve", c.payload, &c.opts)
				require.NoError(t, err)
				info := waitTask(t, b.client, run.ID)
				require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
				var got approvalResult
				require.NoError(t, json.Unmarshal(info.Output, &got))
				require.Equal(t, c.want, got)
				enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
			})
		})
	}
}

func TestAwaitApprovalTimesOut(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := awaitApproval("approval.timeout", 50*time.Millisecond)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		var got approvalResult
		require.NoError(t, json.Unmarshal(info.Output, &got))
		require.Equal(t, approvalResult{}, got, "no decision, ok false")
		require.Contains(t, eventTypesOf(t, b.client, run.ID), history.WaitTimedOut)
	})
}
