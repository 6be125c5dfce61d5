package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// intakeRuns counts the steps an intake workflow ran, by name.
type intakeRuns struct{ extract, classify, store atomic.Int32 }

func (r *intakeRuns) step(ctx workflow.Context, name string, n *atomic.Int32) error {
	_, err := workflow.Step(ctx, name, func(context.Context) (string, error) {
		n.Add(1)
		return name + " done", nil
	}, nil)
	return err
}

// intake is the document intake workflow typ as deployed: v1 extracts,
// awaits an approval and stores; patched (before or after the approval)
// adds "classify" behind workflow.Patched(ctx, patch).
func intake(typ string, runs *intakeRuns, patch string, before, after bool) *sdk.Workflow[struct{}, string] {
	return sdk.NewWorkflow(typ, 1, func(ctx workflow.Context, _ struct{}) (string, error) {
		path := "old"
		classify := func() error {
			if !workflow.Patched(ctx, patch) {
				return nil
			}
			path = "new"
			return runs.step(ctx, "classify", &runs.classify)
		}
		if err := runs.step(ctx, "extract", &runs.extract); err != nil {
			return "", err
		}
		if before {
			if err := classify(); err != nil {
				return "", err
			}
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return "", err
		}
		if after {
			if err := classify(); err != nil {
				return "", err
			}
		}
		return path, runs.step(ctx, "store", &runs.store)
	}, nil)
}

// stepsAndMarkers are a task's recorded step names and patch markers.
func stepsAndMarkers(t *testing.T, c *sdk.Client, id uuid.UUID) ([]string, []history.PatchRecordedData) {
	t.Helper()
	events := taskHistory(t, c, id)
	var steps []string
	for _, s := range eventsOf[history.StepCompletedData](events) {
		steps = append(steps, s.Name)
	}
	return steps, eventsOf[history.PatchRecordedData](events)
}

// The deploy: 50 tasks of v1 wait for their approval when the worker
// running them stops; a worker whose code adds "classify" behind
// workflow.Patched takes over. The waiting tasks, approved, finish on the
// old path (no classify, no marker): their histories hold a wait past the
// patch. Tasks started after the deploy take the new path, marker and
// all. Nothing is dead-lettered. With the patch after the approval
// instead, the waiting tasks reach it under the new code, at their
// frontier: they take the new path too.
func TestDeployAPatchWhileTasksWait(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		const old, fresh, oldAfter, freshAfter = 50, 10, 10, 5
		ctx := context.Background()
		b := setup(t, sdk.WorkerConfig{})
		var v1, v2, v1After, v2After intakeRuns
		sdk.Register(b.worker, intake("intake", &v1, "add-classify", false, false))
		sdk.Register(b.worker, intake("intake.after", &v1After, "add-classify", false, false))
		startIntake := func(typ string, n int) []uuid.UUID {
			wf := intake(typ, nil, "", false, false) // its type, to start by
			ids := make([]uuid.UUID, n)
			for i := range ids {
				run, err := sdk.Start(ctx, b.client, wf, struct{}{}, nil)
				require.NoError(t, err)
				ids[i] = run.ID
			}
			return ids
		}
		waiting := func(ids []uuid.UUID) {
			for _, id := range ids {
				waitForEvent(t, b.client, id, history.WaitStarted)
			}
		}
		before, after := startIntake("intake", old), startIntake("intake.after", oldAfter)
		startWorker(t, b.worker)
		waiting(before)
		waiting(after)
		stopWorker(t, b.worker)
		require.Equal(t, int32(old), v1.extract.Load())
		require.Equal(t, int32(oldAfter), v1After.extract.Load())

		// The deploy.
		w2 := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(w2, intake("intake", &v2, "add-classify", true, false))
		sdk.Register(w2, intake("intake.after", &v2After, "add-classify", false, true))
		startWorker(t, w2)
		newBefore, newAfter := startIntake("intake", fresh), startIntake("intake.after", freshAfter)
		waiting(newBefore)
		waiting(newAfter)
		for _, ids := range [][]uuid.UUID{before, after, newBefore, newAfter} {
			for _, id := range ids {
				_, err := b.client.Signal(ctx, id, "approve", workflow.Decision{Approved: true}, nil)
				require.NoError(t, err)
			}
		}
		finished := func(ids []uuid.UUID, path string, steps []string, marker *history.PatchRecordedData) {
			t.Helper()
			for _, id := range ids {
				info := waitTask(t, b.client, id)
				require.Equal(t, history.StatusCompleted, info.Status, "task %s: last error %+v", id, info.LastError)
				require.JSONEq(t, `"`+path+`"`, string(info.Output), "task %s", id)
				gotSteps, markers := stepsAndMarkers(t, b.client, id)
				require.Equal(t, steps, gotSteps, "task %s", id)
				if marker == nil {
					require.Empty(t, markers, "task %s", id)
				} else {
					require.Equal(t, []history.PatchRecordedData{*marker}, markers, "task %s", id)
				}
			}
		}
		// Patch before the approval: the waiting tasks passed it.
		finished(before, "old", []string{"extract", "store"}, nil)
		finished(newBefore, "new", []string{"extract", "classify", "store"}, &history.PatchRecordedData{PatchID: "add-classify", Position: 1})
		// Patch after it: every task reaches it under the new code.
		finished(after, "new", []string{"extract", "classify", "store"}, &history.PatchRecordedData{PatchID: "add-classify", Position: 1})
		finished(newAfter, "new", []string{"extract", "classify", "store"}, &history.PatchRecordedData{PatchID: "add-classify", Position: 1})

		// The counters: which code ran which step.
		require.Equal(t, int32(fresh), v2.extract.Load(), "v2 extracted only the tasks started after the deploy")
		require.Equal(t, int32(fresh), v2.classify.Load(), "only those classified")
		require.Equal(t, int32(old+fresh), v2.store.Load())
		require.Equal(t, int32(freshAfter), v2After.extract.Load())
		require.Equal(t, int32(oldAfter+freshAfter), v2After.classify.Load())
		require.Equal(t, int32(oldAfter+freshAfter), v2After.store.Load())
		for _, r := range []*intakeRuns{&v1, &v1After} {
			require.Zero(t, r.classify.Load()+r.store.Load(), "v1 stopped at the approvals")
		}
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
