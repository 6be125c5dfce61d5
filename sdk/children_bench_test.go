package sdk_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// BenchmarkChildrenFanOutFanIn runs, per iteration, parents that each fan
// out to no-op children (workflow.MapChildren) and fan their results back
// in: 100 parents of 100 children (10,000 children), and one of 100. It reports children/s (from the first
// start to the last parent's completion) and, for each parent, the time
// from its last child's end (the child_finished the child's terminal
// append wrote) to the parent's completion: p50, p99 and max.
//
//	CAIRN_TEST_DATABASE_URL=... go test -run '^$' -bench ChildrenFanOut -benchtime 1x ./sdk
func BenchmarkChildrenFanOutFanIn(b *testing.B) {
	// 100×100 is the load the issue names; 1×100 is fan-in at light load,
	// with no other parent's children queued ahead.
	for _, size := range []struct{ parents, fanOut int }{{100, 100}, {1, 100}} {
		b.Run(fmt.Sprintf("%dx%d", size.parents, size.fanOut), func(b *testing.B) {
			benchFanOut(b, size.parents, size.fanOut)
		})
	}
}

func benchFanOut(b *testing.B, parents, fanOut int) {
	pool := enginetest.Pool(b)
	schema := enginetest.Schema(b)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Concurrency: 100, Queues: []string{"default", "bench-children"}})
	require.NoError(b, err)
	child := sdk.NewWorkflow("bench.child", 1, func(ctx workflow.Context, n int) (int, error) {
		return workflow.Step(ctx, "double", func(context.Context) (int, error) { return 2 * n, nil }, nil)
	}, nil)
	parent := sdk.NewWorkflow("bench.parent", 1, func(ctx workflow.Context, n int) (int, error) {
		inputs := make([]int, n)
		for i := range inputs {
			inputs[i] = i
		}
		outs, err := workflow.MapChildren(ctx, child, inputs, &workflow.ChildOpts{Queue: "bench-children"})
		sum := 0
		for _, v := range outs {
			sum += v
		}
		return sum, err
	}, nil)
	sdk.Register(worker, child)
	sdk.Register(worker, parent)
	require.NoError(b, worker.Start(context.Background()))
	defer func() { _ = worker.StopAndCancel(context.Background()) }()

	ctx := context.Background()
	var fanIn []time.Duration
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		runs := make([]*sdk.Run[int], parents)
		for i := range runs {
			runs[i], err = sdk.Start(ctx, client, parent, fanOut, nil)
			require.NoError(b, err)
		}
		for _, run := range runs {
			waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			sum, err := run.Result(waitCtx)
			cancel()
			require.NoError(b, err)
			require.Equal(b, fanOut*(fanOut-1), sum)
		}
		elapsed += time.Since(began)
		b.StopTimer()
		for _, run := range runs {
			fanIn = append(fanIn, lastChildToParentEnd(b, client, run))
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(fanIn)
	pct := func(p float64) float64 {
		return float64(fanIn[min(len(fanIn)-1, int(p*float64(len(fanIn))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N*parents*fanOut)/elapsed.Seconds(), "children/s")
	b.ReportMetric(pct(0.50), "fan-in-p50-ms")
	b.ReportMetric(pct(0.99), "fan-in-p99-ms")
	b.ReportMetric(float64(fanIn[len(fanIn)-1].Microseconds())/1000, "fan-in-max-ms")
}

const debugFanIn = false

// lastChildToParentEnd is the time from the parent's last child_finished
// to its task_completed.
func lastChildToParentEnd(b *testing.B, c *sdk.Client, run *sdk.Run[int]) time.Duration {
	b.Helper()
	events, err := c.History(context.Background(), run.ID)
	require.NoError(b, err)
	var lastChild, done time.Time
	for _, e := range events {
		switch e.Type() {
		case history.ChildFinished:
			lastChild = e.At
		case history.TaskCompleted:
			done = e.At
		}
	}
	require.False(b, lastChild.IsZero() || done.IsZero(), "parent %s: no child_finished or task_completed", run.ID)
	if debugFanIn {
		var claims, waits, fins int
		var lastClaim time.Time
		for _, e := range events {
			switch e.Type() {
			case history.AttemptStarted:
				claims++
				lastClaim = e.At
			case history.ChildWaitStarted:
				waits++
			case history.ChildFinished:
				fins++
			}
		}
		b.Logf("parent %s: %d events, %d attempts, %d waits, %d finished; last child %s, last claim +%s, done +%s",
			run.ID, len(events), claims, waits, fins, lastChild.Format("15:04:05.000"), lastClaim.Sub(lastChild), done.Sub(lastChild))
	}
	return done.Sub(lastChild)
}
