package sdk_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// BenchmarkSignalToWorkflowResumed measures the time from Client.Signal
// being called, for a task waiting in workflow.Receive, to the receive
// returning in the workflow's next attempt (the signal's append makes the
// task due and NOTIFYs the ready channel; a worker claims it and replays to
// the receive), and reports its p50 and p99.
//
//	CAIRN_TEST_DATABASE_URL=... go test -run '^$' -bench SignalToWorkflow -benchtime 300x ./sdk
func BenchmarkSignalToWorkflowResumed(b *testing.B) {
	pool := enginetest.Pool(b)
	schema := enginetest.Schema(b)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	// A poll far longer than the resumes measured: only the notification
	// can bring them this soon.
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Concurrency: 4, PollInterval: 10 * time.Second})
	require.NoError(b, err)
	resumed := make(chan time.Time, 1)
	wf := sdk.NewWorkflow("bench.signal", 1, func(ctx workflow.Context, _ int) (string, error) {
		v, _, err := workflow.Receive[string](ctx, "go", time.Hour)
		if err == nil {
			select {
			case resumed <- time.Now():
			default:
			}
		}
		return v, err
	}, nil)
	sdk.Register(worker, wf)
	require.NoError(b, worker.Start(context.Background()))
	defer func() { _ = worker.StopAndCancel(context.Background()) }()

	ctx := context.Background()
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		res, err := sdk.Start(ctx, client, wf, i, nil)
		require.NoError(b, err)
		waitForWait(b, client, res.ID)
		sent := time.Now()
		_, err = client.Signal(ctx, res.ID, "go", "now", nil)
		require.NoError(b, err)
		latencies = append(latencies, (<-resumed).Sub(sent))
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = client.Wait(waitCtx, res.ID)
		cancel()
		require.NoError(b, err)
	}
	b.StopTimer()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(latencies[len(latencies)-1].Microseconds())/1000, "max-ms")
}

// waitForWait polls until the task waits in a receive (status pending
// after wait_started).
func waitForWait(b *testing.B, c *sdk.Client, id uuid.UUID) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := c.History(context.Background(), id)
		require.NoError(b, err)
		if n := len(events); n > 0 && events[n-1].Type() == history.WaitStarted {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("task %s never waited", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkSignalSend measures Client.Signal to a pending task whose type
// declares its signals, against one whose type declares none: the cost of
// the check (one more read of the task's row, and the payload's
// validation; the namespace's declarations are cached).
//
//	CAIRN_TEST_DATABASE_URL=... go test -run '^$' -bench SignalSend -benchtime 2000x ./sdk
func BenchmarkSignalSend(b *testing.B) {
	for _, declared := range []bool{false, true} {
		name := "Undeclared"
		var opts *sdk.WorkflowOpts
		if declared {
			name, opts = "Declared", &sdk.WorkflowOpts{Signals: []sdk.SignalDecl{sdk.DeclareSignal[note]("note")}}
		}
		b.Run(name, func(b *testing.B) {
			pool := enginetest.Pool(b)
			schema := enginetest.Schema(b)
			client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
			require.NoError(b, err)
			b.Cleanup(client.Close)
			wf := sdk.NewWorkflow("bench.send", 1, func(ctx workflow.Context, _ int) (string, error) { return "", nil }, opts)
			// A worker of another queue: it records the type, and claims
			// nothing of it.
			worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Queues: []string{"elsewhere"}})
			require.NoError(b, err)
			sdk.Register(worker, wf)
			require.NoError(b, worker.Start(context.Background()))
			defer func() { _ = worker.StopAndCancel(context.Background()) }()
			ctx := context.Background()
			res, err := sdk.Start(ctx, client, wf, 0, nil)
			require.NoError(b, err)
			payload := note{Text: "looks fine", Tags: []string{"a", "b"}}
			b.ResetTimer()
			for range b.N {
				_, err := client.Signal(ctx, res.ID, "note", payload, nil)
				require.NoError(b, err)
			}
		})
	}
}
