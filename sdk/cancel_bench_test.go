package sdk_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/stretchr/testify/require"
)

// BenchmarkCancelToContextCancelled measures the time from Client.Cancel
// being called to the running step's context being cancelled (NOTIFY on
// the cancel channel to the worker), and reports its p50 and p99.
//
//	CAIRN_TEST_DATABASE_URL=... go test -run '^$' -bench CancelToContext -benchtime 300x ./sdk
func BenchmarkCancelToContextCancelled(b *testing.B) {
	pool := enginetest.Pool(b)
	schema := enginetest.Schema(b)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Concurrency: 4, PollInterval: 50 * time.Millisecond})
	require.NoError(b, err)
	started := make(chan struct{})
	cancelled := make(chan time.Time)
	wf := sdk.NewWorkflow("bench.cancel", 1, func(ctx workflow.Context, _ int) (string, error) {
		return workflow.Step(ctx, "wait", func(ctx context.Context) (string, error) {
			started <- struct{}{}
			<-ctx.Done()
			cancelled <- time.Now()
			return "", ctx.Err()
		}, nil)
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
		<-started
		sent := time.Now()
		require.NoError(b, client.Cancel(ctx, res.ID, "bench"))
		latencies = append(latencies, (<-cancelled).Sub(sent))
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
