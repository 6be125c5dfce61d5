package sdk_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// approvalV1 is a v1 workflow that extracts, then awaits an approval; the
// changed code adds a step before the approval without patching.
func approvalV1(changed bool) *sdk.Workflow[int, int] {
	return sdk.NewWorkflow("dc.review", 1, func(ctx workflow.Context, in int) (int, error) {
		if _, err := workflow.Step(ctx, "extract", one, nil); err != nil {
			return 0, err
		}
		if changed {
			if _, err := workflow.Step(ctx, "classify", one, nil); err != nil {
				return 0, err
			}
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return 0, err
		}
		return in, nil
	}, nil)
}

func TestDeployCheckStrandedApprovals(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		ctx := context.Background()
		b := setup(t, sdk.WorkerConfig{Concurrency: 20})
		sdk.Register(b.worker, approvalV1(false))
		startWorker(t, b.worker)
		waiting := make([]uuid.UUID, 50)
		for i := range waiting {
			run, err := sdk.Start(ctx, b.client, approvalV1(false), i, nil)
			require.NoError(t, err)
			waiting[i] = run.ID
		}
		for _, id := range waiting {
			waitForEvent(t, b.client, id, history.WaitStarted)
		}
		stopWorker(t, b.worker)
		attempts := func() map[uuid.UUID]int {
			out := map[uuid.UUID]int{}
			for _, id := range waiting {
				info, err := b.client.Get(ctx, id)
				require.NoError(t, err)
				out[id] = info.Attempt
			}
			return out
		}
		before := attempts()

		// Refuse: Start fails naming all 50, and claims none.
		var logs syncBuffer
		refusing := b.newWorker(t, sdk.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			DeployCheck: sdk.DeployCheckConfig{Policy: sdk.DeployRefuse}})
		sdk.Register(refusing, approvalV1(true))
		err := refusing.Start(ctx)
		require.ErrorIs(t, err, sdk.ErrStranded)
		require.Len(t, refusing.Stranded(), 50)
		for _, id := range waiting {
			require.Contains(t, err.Error(), id.String())
			require.Contains(t, logs.String(), "task_id="+id.String())
		}
		require.Contains(t, err.Error(), `receive 0: recorded approve, called (step 1 "classify")`)
		require.Equal(t, before, attempts(), "a refused worker claims nothing")
		found, err := b.client.StrandedTasks(ctx, &sdk.StrandedOpts{Type: "dc.review", Limit: 1000})
		require.NoError(t, err)
		require.Len(t, found, 50, "recorded for the console and queue diagnose")
		require.Equal(t, refusing.WorkerID(), found[0].WorkerID)
		require.Equal(t, "receive", found[0].Kind)
		require.Equal(t, "approve", found[0].Recorded)

		// Skip: the 50 are approved (due now), new tasks run, and none of
		// the 50 is claimed.
		reg := prometheus.NewRegistry()
		metrics, err := sdk.NewMetrics(reg, nil)
		require.NoError(t, err)
		skipping := b.newWorker(t, sdk.WorkerConfig{Concurrency: 20, Metrics: metrics})
		sdk.Register(skipping, approvalV1(true))
		for _, id := range waiting {
			_, err := b.client.Signal(ctx, id, "approve", workflow.Decision{Approved: true}, nil)
			require.NoError(t, err)
		}
		startWorker(t, skipping)
		require.Len(t, skipping.Stranded(), 50)
		require.Equal(t, 50.0, strandedGauge(t, reg))
		fresh := make([]uuid.UUID, 20)
		for i := range fresh {
			run, err := sdk.Start(ctx, b.client, approvalV1(true), i, nil)
			require.NoError(t, err)
			fresh[i] = run.ID
		}
		for _, id := range fresh {
			waitForEvent(t, b.client, id, history.WaitStarted)
			_, err := b.client.Signal(ctx, id, "approve", workflow.Decision{Approved: true}, nil)
			require.NoError(t, err)
		}
		for _, id := range fresh {
			requireStatus(t, b.client, id, history.StatusCompleted)
		}
		require.Equal(t, before, attempts(), "the stranded tasks are never claimed")
		for _, id := range waiting {
			info, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, history.StatusPending, info.Status)
		}
	})
}

// strandedGauge is the value of cairn_stranded_tasks for dc.review@1.
func strandedGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "cairn_stranded_tasks" {
			continue
		}
		for _, m := range f.GetMetric() {
			return m.GetGauge().GetValue()
		}
	}
	t.Fatal("no cairn_stranded_tasks series")
	return 0
}

func TestDeployCheckConfigIsValidated(t *testing.T) {
	t.Parallel()
	for _, cfg := range []sdk.DeployCheckConfig{{Policy: "maybe"}, {Sample: -1}, {Sample: sdk.MaxReplayTasks + 1}} {
		_, err := sdk.NewWorker(sdk.WorkerConfig{Store: nil, DeployCheck: cfg})
		require.ErrorContains(t, err, "DeployCheck", "%+v", cfg)
	}
}

// renamedV1 is approvalV1 with its first step renamed: the runtime itself
// finds such a history non-deterministic.
func renamedV1() *sdk.Workflow[int, int] {
	return sdk.NewWorkflow("dc.review", 1, func(ctx workflow.Context, in int) (int, error) {
		if _, err := workflow.Step(ctx, "extract-v2", one, nil); err != nil {
			return 0, err
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return 0, err
		}
		return in, nil
	}, nil)
}

// Under skip, a task in flight before the worker started that its check
// did not sample (Sample 1) and that turns out non-deterministic when it
// runs is released, not dead-lettered, and not claimed again.
func TestDeployCheckSkipReleasesWhatItFindsAtRunTime(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		ctx := context.Background()
		b := setup(t, sdk.WorkerConfig{})
		sdk.Register(b.worker, approvalV1(false))
		startWorker(t, b.worker)
		waiting := make([]uuid.UUID, 5)
		for i := range waiting {
			run, err := sdk.Start(ctx, b.client, approvalV1(false), i, nil)
			require.NoError(t, err)
			waiting[i] = run.ID
		}
		for _, id := range waiting {
			waitForEvent(t, b.client, id, history.WaitStarted)
		}
		stopWorker(t, b.worker)
		for _, id := range waiting {
			_, err := b.client.Signal(ctx, id, "approve", workflow.Decision{Approved: true}, nil)
			require.NoError(t, err)
		}

		w := b.newWorker(t, sdk.WorkerConfig{DeployCheck: sdk.DeployCheckConfig{Sample: 1}})
		sdk.Register(w, renamedV1())
		startWorker(t, w)
		require.Len(t, w.Stranded(), 1, "the sample of one")
		sampled := w.Stranded()[0].TaskID
		for _, id := range waiting {
			if id.String() == sampled {
				continue
			}
			waitForEvent(t, b.client, id, history.TaskReleased)
		}
		// New tasks run to their end meanwhile; the released ones are not
		// claimed again.
		fresh, err := sdk.Start(ctx, b.client, renamedV1(), 9, nil)
		require.NoError(t, err)
		waitForEvent(t, b.client, fresh.ID, history.WaitStarted)
		_, err = b.client.Signal(ctx, fresh.ID, "approve", workflow.Decision{Approved: true}, nil)
		require.NoError(t, err)
		requireStatus(t, b.client, fresh.ID, history.StatusCompleted)
		// A claim issued just before a release may still take the task
		// once more (it read the exclusions before the release added
		// them): each such attempt is released too, and then no more.
		attempts := map[uuid.UUID]int{}
		for _, id := range waiting {
			info, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, history.StatusPending, info.Status, "task %s", id)
			types := eventTypesOf(t, b.client, id)
			if id.String() == sampled {
				require.Equal(t, 1, info.Attempt, "the sampled task is never claimed: %v", types)
				continue
			}
			require.GreaterOrEqual(t, info.Attempt, 2, "the v1 attempt and the one that found it non-deterministic: %v", types)
			require.Equal(t, info.Attempt-1, countType(types, history.TaskReleased),
				"every attempt of the new worker released the task: %v", types)
			require.NotContains(t, types, history.TaskDeadLettered)
			attempts[id] = info.Attempt
		}
		time.Sleep(20 * 50 * time.Millisecond) // twenty of the worker's polls
		for id, n := range attempts {
			info, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, n, info.Attempt, "task %s is not claimed again: %v", id, eventTypesOf(t, b.client, id))
		}
	})
}

func countType(types []history.Type, want history.Type) int {
	n := 0
	for _, ty := range types {
		if ty == want {
			n++
		}
	}
	return n
}
