package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// A known workload through a worker and a client sharing one Metrics: 5
// tasks complete (one of them reports 100/50 tokens and $0.01), 2 fail
// once and then complete, 1 fails permanently and is dead-lettered (its
// failed step reported 7 tokens), and 1 is cancelled before it runs. The
// counters must say exactly that, and the queue gauges what the database
// holds.
func TestMetricsOfAKnownWorkload(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := sdk.NewMetrics(reg, nil)
	require.NoError(t, err)
	pool, schema := enginetest.Pool(t), enginetest.Schema(t)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema, Metrics: metrics})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: schema, Metrics: metrics, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, reg.Register(sdk.NewQueueCollector(sdk.ClientStore(client))))

	okWF, flakyWF, brokenWF := registerMetricsWorkflows(worker)
	ctx := context.Background()
	var ids []uuid.UUID
	for i := range 5 {
		ids = append(ids, startTask(t, client, okWF, i, nil))
	}
	for i := range 2 {
		ids = append(ids, startTask(t, client, flakyWF, i, nil))
	}
	broken := startTask(t, client, brokenWF, 0, nil)
	ids = append(ids, broken)
	cancelled := startTask(t, client, okWF, 99, &sdk.StartOpts{Delay: time.Hour})
	require.NoError(t, client.Cancel(ctx, cancelled, "changed my mind"))

	g := enginetest.Gather(t, reg)
	require.Equal(t, 8.0, g.Value("cairn_queue_tasks", "queue", "default", "status", "pending"))
	require.Equal(t, 4, g.Series("cairn_queue_tasks"), "one queue, four statuses")
	require.Equal(t, 1.0, g.Value("cairn_cancellations_total", "type", "metrics.ok"))
	require.Equal(t, 1.0, g.Value("cairn_tasks_finished_total", "type", "metrics.ok", "outcome", "cancelled"),
		"the client's own cancel, counted by the client")

	startWorker(t, worker)
	for _, id := range ids {
		waitTask(t, client, id)
	}
	stopWorker(t, worker) // every outcome written (and counted) before the scrape
	g = enginetest.Gather(t, reg)

	finished := "cairn_tasks_finished_total"
	require.Equal(t, 5.0, g.Value(finished, "type", "metrics.ok", "outcome", "completed"))
	require.Equal(t, 2.0, g.Value(finished, "type", "metrics.flaky", "outcome", "completed"))
	require.Equal(t, 1.0, g.Value(finished, "type", "metrics.broken", "outcome", "dead_lettered"))
	require.Equal(t, 9.0, g.Value(finished), "nothing else finished")
	require.Equal(t, 2.0, g.Value("cairn_retries_total", "type", "metrics.flaky", "class", "transient"))
	require.Equal(t, 2.0, g.Value("cairn_retries_total"))
	require.Equal(t, 1.0, g.Value("cairn_dead_letters_total", "type", "metrics.broken"))
	require.Equal(t, 1.0, g.Value("cairn_dead_letters_total"))
	require.Equal(t, 1.0, g.Value("cairn_cancellations_total"))
	require.Zero(t, g.Value("cairn_lease_expirations_total"))
	require.Zero(t, g.Value("cairn_compensations_total"))

	// 5 + 2×2 + 1 attempts, each claimed once and ended once; 5 + 2
	// completed steps (a failed step is no completed step).
	require.Equal(t, uint64(10), g.SampleCount("cairn_schedule_to_start_seconds", "queue", "default"))
	require.Equal(t, uint64(5), g.SampleCount("cairn_attempt_duration_seconds", "type", "metrics.ok"))
	require.Equal(t, uint64(4), g.SampleCount("cairn_attempt_duration_seconds", "type", "metrics.flaky"))
	require.Equal(t, uint64(1), g.SampleCount("cairn_attempt_duration_seconds", "type", "metrics.broken"))
	require.Equal(t, uint64(5), g.SampleCount("cairn_step_duration_seconds", "type", "metrics.ok", "step", "answer"))
	require.Equal(t, uint64(2), g.SampleCount("cairn_step_duration_seconds", "type", "metrics.flaky", "step", "call"))
	require.Equal(t, uint64(7), g.SampleCount("cairn_step_duration_seconds"))

	tokens := "cairn_ai_tokens_total"
	require.Equal(t, 100.0, g.Value(tokens, "type", "metrics.ok", "model", "claude-test", "direction", "input"))
	require.Equal(t, 50.0, g.Value(tokens, "type", "metrics.ok", "model", "claude-test", "direction", "output"))
	require.Equal(t, 7.0, g.Value(tokens, "type", "metrics.broken", "model", "claude-test", "direction", "input"),
		"a failed call's tokens count")
	require.Equal(t, 157.0, g.Value(tokens))
	require.InDelta(t, 0.01, g.Value("cairn_ai_cost_usd_total", "type", "metrics.ok", "model", "claude-test"), 1e-12)
	require.InDelta(t, 0.01, g.Value("cairn_ai_cost_usd_total"), 1e-12)

	require.Equal(t, 1.0, g.Value("cairn_queue_tasks", "queue", "default", "status", "dead_lettered"))
	for _, status := range []string{"pending", "retrying", "running"} {
		require.Zero(t, g.Value("cairn_queue_tasks", "queue", "default", "status", status), status)
	}
	require.Zero(t, g.Value("cairn_queue_oldest_waiting_seconds"))

	// The history says the same as the metrics.
	failed := eventsOf[history.AttemptFailedData](taskHistory(t, client, broken))
	require.Len(t, failed, 1)
	require.Equal(t, []history.Usage{{Model: "claude-test", InputTokens: 7}}, failed[0].Usage)
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(client))
}

// registerMetricsWorkflows registers the workload's three types: ok (one
// step; the task with input 0 reports AI usage), flaky (its step fails on
// the first attempt), broken (its step fails permanently after reporting
// usage).
func registerMetricsWorkflows(w *sdk.Worker) (ok, flaky, broken *sdk.Workflow[int, int]) {
	ok = sdk.NewWorkflow("metrics.ok", 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "answer", func(ctx context.Context) (int, error) {
			if in == 0 {
				activities.RecordUsage(ctx, activities.Usage{Model: "claude-test", InputTokens: 100, OutputTokens: 50, CostUSD: 0.01})
			}
			return in, nil
		}, nil)
	}, nil)
	flaky = sdk.NewWorkflow("metrics.flaky", 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "call", func(ctx context.Context) (int, error) {
			if info, _ := activities.GetInfo(ctx); info.Attempt == 1 {
				return 0, errors.New("503 from upstream")
			}
			return in, nil
		}, nil)
	}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
	broken = sdk.NewWorkflow("metrics.broken", 1, func(ctx workflow.Context, in int) (int, error) {
		return workflow.Step(ctx, "call", func(ctx context.Context) (int, error) {
			activities.RecordUsage(ctx, activities.Usage{Model: "claude-test", InputTokens: 7})
			return 0, activities.Permanent(errors.New("400: the prompt is malformed"))
		}, nil)
	}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
	sdk.Register(w, ok)
	sdk.Register(w, flaky)
	sdk.Register(w, broken)
	return ok, flaky, broken
}

func startTask(t *testing.T, c *sdk.Client, wf *sdk.Workflow[int, int], in int, opts *sdk.StartOpts) uuid.UUID {
	t.Helper()
	res, err := sdk.Start(context.Background(), c, wf, in, opts)
	require.NoError(t, err)
	return res.ID
}
