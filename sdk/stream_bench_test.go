package sdk_test

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// BenchmarkStreamLatency measures how long a chunk takes from
// activities.Stream in a step to a Client.Stream reader in another
// client: each chunk carries the time it was written, the reader
// subtracts it from the time it arrives. Chunks are written one every
// 2ms (latency, not throughput: a burst is batched), b.N of them; p50 and
// p99 are reported in milliseconds.
//
//	CAIRN_TEST_DATABASE_URL=... go test -run XXX -bench BenchmarkStreamLatency -benchtime 2000x ./sdk
func BenchmarkStreamLatency(b *testing.B) {
	b.Run("PostgreSQL", func(b *testing.B) {
		s := enginetest.Store(b)
		benchStreamLatency(b, s, s)
	})
	b.Run("SQLite", func(b *testing.B) {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "cairn.db"))
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		benchStreamLatency(b, s, s)
	})
}

func benchStreamLatency(b *testing.B, workerStore, readerStore store.Store) {
	ctx := context.Background()
	n := b.N
	wf := sdk.NewWorkflow("bench.stream", 1, func(ctx workflow.Context, n int) (int, error) {
		return workflow.Step(ctx, "write", func(ctx context.Context) (int, error) {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for range n {
				<-tick.C
				if err := activities.Stream(ctx, "t", strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
					return 0, err
				}
			}
			return n, nil
		}, nil)
	}, nil)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: workerStore, PollInterval: 10 * time.Millisecond})
	require.NoError(b, err)
	sdk.Register(w, wf)
	client, err := sdk.NewClient(sdk.ClientConfig{Store: readerStore})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	run, err := sdk.Start(ctx, client, wf, n, nil)
	require.NoError(b, err)
	lat := make([]time.Duration, 0, n)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		for it, err := range client.Stream(ctx, run.ID, 0, nil) {
			if first {
				close(ready) // the reader listens: the worker may start
				first = false
			}
			if err != nil {
				done <- err
				return
			}
			if it.Kind == sdk.StreamChunk {
				sent, err := strconv.ParseInt(it.Text(), 10, 64)
				if err != nil {
					done <- err
					return
				}
				lat = append(lat, time.Since(time.Unix(0, sent)))
			}
		}
		done <- nil
	}()
	<-ready
	b.ResetTimer()
	require.NoError(b, w.Start(ctx))
	require.NoError(b, <-done)
	b.StopTimer()
	require.NoError(b, w.Stop(ctx))
	require.Len(b, lat, n)
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
