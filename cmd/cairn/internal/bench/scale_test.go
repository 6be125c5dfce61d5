package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The start latency of `cairn bench scale` is read from the tasks' own
// rows: with a worker running, every task started is claimed and the
// percentiles are ordered and positive; with none, the wait for claims
// gives up and says how many were never claimed.
func TestStartLatencyReadsTheClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var out bytes.Buffer
	env, closeEnv, err := openBench(ctx, pgConfig(t, "bench_latency", &out), "scale")
	require.NoError(t, err)
	defer closeEnv()
	require.NoError(t, env.reset(ctx))

	_, err = env.startLatency(ctx, 50, 200*time.Millisecond, 300*time.Millisecond)
	require.ErrorContains(t, err, "10 of 10 tasks not claimed", "no worker runs")

	pool, err := env.workerPool(ctx, 4)
	require.NoError(t, err)
	defer pool.Close()
	w, err := newBenchWorker(pool, &env.cfg, 10, nil)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	defer func() { require.NoError(t, w.Stop(ctx)) }()
	lat, err := env.startLatency(ctx, 50, 400*time.Millisecond, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 20, lat.Count)
	require.Positive(t, lat.P50)
	require.LessOrEqual(t, lat.P50, lat.P90)
	require.LessOrEqual(t, lat.P90, lat.P99)
	require.LessOrEqual(t, lat.P99, lat.Max)
}
