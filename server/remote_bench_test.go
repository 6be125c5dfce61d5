package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// remoteNoop hands one no-op step to the queue bench.
var remoteNoop = sdk.NewWorkflow("bench.remote", 1, func(ctx workflow.Context, n int) (int, error) {
	return workflow.Remote[int](ctx, "noop", n, &workflow.RemoteOpts{Queue: "bench"})
}, nil)

// remoteFan hands n no-op steps to the queue bench at once and waits for
// all of them.
var remoteFan = sdk.NewWorkflow("bench.remote_fan", 1, func(ctx workflow.Context, n int) (int, error) {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	outs, err := workflow.MapRemote[int, int](ctx, "noop", in, &workflow.RemoteOpts{Queue: "bench"})
	return len(outs), err
}, nil)

// remoteBench is a server over real HTTP on loopback, on PostgreSQL, with
// a Go worker of bench.remote, and a client to start and wait with.
func remoteBench(b *testing.B) (url string, c *sdk.Client) {
	b.Helper()
	st := enginetest.Store(b)
	api, err := New(Config{Store: st})
	require.NoError(b, err)
	require.NoError(b, api.Start(context.Background())) // its notifier wakes the long polls
	b.Cleanup(func() { _ = api.Stop(context.Background()) })
	srv := httptest.NewServer(api.Handler())
	b.Cleanup(srv.Close)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 32})
	require.NoError(b, err)
	sdk.Register(w, remoteNoop)
	sdk.Register(w, remoteFan)
	require.NoError(b, w.Start(context.Background()))
	b.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	c, err = sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(b, err)
	b.Cleanup(c.Close)
	return srv.URL, c
}

// httpWorker works the queue bench over the protocol, as a worker in
// another language would: long-poll claims of up to max steps, each
// completed with its input at once, in parallel. It reports each claim's dispatch →
// claim latency (the step's dispatched_at to the claim's answer, one
// clock) until ctx ends.
func httpWorker(ctx context.Context, base string, max int, latency func(time.Duration)) {
	hc := &http.Client{}
	post := func(path string, body any) ([]byte, int) {
		raw, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(raw))
		if err != nil {
			return nil, 0
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return nil, 0
		}
		defer res.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(res.Body)
		return buf.Bytes(), res.StatusCode
	}
	for ctx.Err() == nil {
		body, status := post("/v1/remote-steps/claim", map[string]any{"queue": "bench", "worker": "bench", "max": max, "wait_seconds": 20})
		got := time.Now()
		if status != http.StatusOK {
			continue
		}
		var claimed remoteClaimResponse
		if json.Unmarshal(body, &claimed) != nil {
			continue
		}
		// Each step completed on its own, as a worker's slots do.
		var wg sync.WaitGroup
		for _, s := range claimed.Steps {
			latency(got.Sub(s.DispatchedAt))
			wg.Add(1)
			go func() {
				defer wg.Done()
				post("/v1/remote-steps/"+url.PathEscape(s.Claim)+"/complete", map[string]any{"output": s.Input})
			}()
		}
		wg.Wait()
	}
}

// BenchmarkRemoteDispatchToClaim: one remote step at a time, a worker
// waiting in its long poll: dispatch → claim p50 and p99 (and the whole
// round trip, start → the workflow's end, per op).
func BenchmarkRemoteDispatchToClaim(b *testing.B) {
	base, c := remoteBench(b)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var lat []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		httpWorker(ctx, base, 1, func(d time.Duration) { mu.Lock(); lat = append(lat, d); mu.Unlock() })
	}()
	b.Cleanup(func() { cancel(); <-done })
	run := func() {
		res, err := sdk.Start(ctx, c, remoteNoop, 1, nil)
		require.NoError(b, err)
		_, err = res.Result(ctx)
		require.NoError(b, err)
	}
	for range 20 { // warm up connections and plans
		run()
	}
	mu.Lock()
	lat = lat[:0]
	mu.Unlock()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkRemoteThroughput: b.N workflows of one remote no-op step each,
// started at once, worked by two protocol workers claiming up to 16 at a
// time: remote steps per second, the workflows' own attempts included.
func BenchmarkRemoteThroughput(b *testing.B) {
	base, c := remoteBench(b)
	ctx := startHTTPWorkers(b, base, 2, 16)
	b.ResetTimer()
	start := time.Now()
	var runs []*sdk.Run[int]
	for i := range b.N {
		res, err := sdk.Start(ctx, c, remoteNoop, i, nil)
		require.NoError(b, err)
		runs = append(runs, res)
	}
	for _, r := range runs {
		_, err := r.Result(ctx)
		require.NoError(b, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
}

// BenchmarkRemoteFanOut: per op, one workflow hands fanOutSteps no-op
// steps to two protocol workers at once (MapRemote) and waits for them:
// each answer is recorded against a history that grows with the others',
// the case where reading the whole history per answer was quadratic.
func BenchmarkRemoteFanOut(b *testing.B) {
	const fanOutSteps = 500
	base, c := remoteBench(b)
	ctx := startHTTPWorkers(b, base, 2, 16)
	start := time.Now()
	for b.Loop() {
		res, err := sdk.Start(ctx, c, remoteFan, fanOutSteps, nil)
		require.NoError(b, err)
		n, err := res.Result(ctx)
		require.NoError(b, err)
		require.Equal(b, fanOutSteps, n)
	}
	b.ReportMetric(float64(b.N*fanOutSteps)/time.Since(start).Seconds(), "steps/s")
}

// startHTTPWorkers runs n protocol workers (httpWorker) claiming up to
// max steps each until the benchmark ends; it returns their context.
func startHTTPWorkers(b *testing.B, base string, n, max int) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { httpWorker(ctx, base, max, func(time.Duration) {}) })
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
	return ctx
}
