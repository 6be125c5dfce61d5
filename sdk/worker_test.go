package sdk_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestPermanentStepErrorDeadLettersAfterOneAttempt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var validateRuns atomic.Int32
		wf := sdk.NewWorkflow("invoice.check", 1, func(ctx workflow.Context, in string) (string, error) {
			text, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) { return "text:" + in, nil }, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "validate", func(context.Context) (string, error) {
				validateRuns.Add(1)
				return "", errors.Wrap(activities.Permanent(errors.New("total does not match line items")), "validate "+text)
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(5)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "inv-1", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)

		require.Equal(t, history.StatusDeadLettered, info.Status, "a permanent error waits for an operator")
		require.Equal(t, 1, info.Attempt)
		require.Equal(t, int32(1), validateRuns.Load(), "a permanent error is not retried")
		require.NotNil(t, info.FinishedAt)
		require.NotNil(t, info.LastError)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Equal(t, "validate", info.LastError.Step)
		require.Equal(t, 1, info.LastError.Position)
		require.Contains(t, info.LastError.Message, "total does not match line items")
		_, err = sdk.Output[string](info)
		require.Error(t, err, "a dead-lettered task has no output")

		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.AttemptFailed, history.TaskDeadLettered}, eventTypes(events))
		failed := eventsOf[history.AttemptFailedData](events)
		require.Nil(t, failed[0].NextRunAt, "no retry is scheduled")
		require.Equal(t, *info.LastError, failed[0].Error)
		dead := eventsOf[history.TaskDeadLetteredData](events)[0]
		require.Equal(t, *info.LastError, dead.Error)
		require.Contains(t, dead.Reason, "permanent error (mark:permanent)")
		require.Equal(t, "mark:permanent", info.LastError.ClassifiedBy)

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestTransientErrorsExhaustAttemptsAndDeadLetter(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var mu sync.Mutex
		runs := map[string]int{} // by input
		wf := sdk.NewWorkflow("reply.send", 1, func(ctx workflow.Context, in string) (string, error) {
			return workflow.Step(ctx, "send", func(context.Context) (string, error) {
				mu.Lock()
				runs[in]++
				mu.Unlock()
				return "", errors.New("smtp 451: try again later") // unmarked step errors are transient
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		byPolicy, err := sdk.Start(ctx, b.client, wf, "policy", nil)
		require.NoError(t, err)
		byOpts, err := sdk.Start(ctx, b.client, wf, "opts", &sdk.StartOpts{MaxAttempts: 2})
		require.NoError(t, err)

		for _, tc := range []struct {
			id       *sdk.Run[string]
			input    string
			attempts int
			reason   string
		}{
			{id: byPolicy, input: "policy", attempts: 3, reason: "attempt 3 of 3"},
			{id: byOpts, input: "opts", attempts: 2, reason: "attempt 2 of 2"},
		} {
			info := waitTask(t, b.client, tc.id.ID)
			require.Equal(t, history.StatusDeadLettered, info.Status, tc.input)
			require.Equal(t, tc.attempts, info.Attempt, tc.input)
			require.Equal(t, tc.attempts, info.MaxAttempts, tc.input)
			require.Equal(t, history.Transient, info.LastError.Class, tc.input)
			require.Equal(t, "send", info.LastError.Step, tc.input)
			require.Contains(t, info.LastError.Message, "smtp 451", tc.input)

			events := taskHistory(t, b.client, tc.id.ID)
			want := []history.Type{history.TaskScheduled}
			for range tc.attempts {
				want = append(want, history.AttemptStarted, history.AttemptFailed)
			}
			want = append(want, history.TaskDeadLettered)
			require.Equal(t, want, eventTypes(events), tc.input)
			failed := eventsOf[history.AttemptFailedData](events)
			for i, f := range failed {
				if i < len(failed)-1 {
					require.NotNil(t, f.NextRunAt, "attempt %d of %s is retried", i+1, tc.input)
				} else {
					require.Nil(t, f.NextRunAt, "the last attempt of %s is not retried", tc.input)
				}
			}
			dead := eventsOf[history.TaskDeadLetteredData](events)[0]
			require.Contains(t, dead.Reason, "retries exhausted", tc.input)
			require.Contains(t, dead.Reason, tc.reason, tc.input)
			require.Equal(t, *info.LastError, dead.Error)
		}
		mu.Lock()
		require.Equal(t, map[string]int{"policy": 3, "opts": 2}, runs)
		mu.Unlock()

		stopWorker(t, b.worker)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestBodyErrorIsPermanentUnlessMarked(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("doc.route", 1, func(ctx workflow.Context, in string) (string, error) {
			if _, err := workflow.Step(ctx, "classify", func(context.Context) (string, error) { return in, nil }, nil); err != nil {
				return "", err
			}
			if in == "retry" {
				return "", activities.Transient(errors.New("routing table not loaded"))
			}
			return "", errors.New("no route for document")
		}, &sdk.WorkflowOpts{Retry: fastRetry(2)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		plain, err := sdk.Start(ctx, b.client, wf, "plain", nil)
		require.NoError(t, err)
		retry, err := sdk.Start(ctx, b.client, wf, "retry", nil)
		require.NoError(t, err)

		info := waitTask(t, b.client, plain.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status, "the body's own error is permanent")
		require.Equal(t, "default:workflow", info.LastError.ClassifiedBy)
		require.Equal(t, 1, info.Attempt)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Empty(t, info.LastError.Step)

		info = waitTask(t, b.client, retry.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status, "a body error marked transient is retried")
		require.Equal(t, 2, info.Attempt)

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestNondeterministicWorkflowFailsTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		extractBlocked, releaseExtract := make(chan struct{}), make(chan struct{})
		// Version 1 as first deployed: ocr, extract, validate.
		v1 := sdk.NewWorkflow("doc.process", 1, func(ctx workflow.Context, in string) (string, error) {
			text, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) { return "text:" + in, nil }, nil)
			if err != nil {
				return "", err
			}
			fields, err := workflow.Step(ctx, "extract", func(ctx context.Context) (string, error) {
				close(extractBlocked)
				select {
				case <-releaseExtract:
					return "fields:" + text, nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "validate", func(context.Context) (string, error) { return fields, nil }, nil)
		}, nil)
		sdk.Register(b.worker, v1)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, v1, "a", nil)
		require.NoError(t, err)
		// The first worker stops after extract: the history holds ocr and extract.
		stopWhileStepBlocked(t, b.worker, extractBlocked, releaseExtract)

		// The same name and version, changed in place: classify replaces extract.
		var classifyRuns atomic.Int32
		changed := sdk.NewWorkflow("doc.process", 1, func(ctx workflow.Context, in string) (string, error) {
			if _, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) { return "text:" + in, nil }, nil); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "classify", func(context.Context) (string, error) {
				classifyRuns.Add(1)
				return "invoice", nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(5), SkipDeadLetter: true})
		// Ignore: without it, the deploy check (DeploySkip) would leave the
		// task to a worker with v1's code (TestDeployCheckStrandedApprovals).
		second := b.newWorker(t, sdk.WorkerConfig{DeployCheck: sdk.DeployCheckConfig{Policy: sdk.DeployIgnore}})
		sdk.Register(second, changed)
		startWorker(t, second)
		info := waitTask(t, b.client, res.ID)

		require.Equal(t, history.StatusFailed, info.Status)
		require.Equal(t, 2, info.Attempt, "non-determinism is not retried: %v", eventTypesOf(t, b.client, res.ID))
		require.Zero(t, classifyRuns.Load(), "the mismatched step must not run")
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Equal(t, "nondeterminism", info.LastError.Kind)
		require.Contains(t, info.LastError.Message, "step 1")
		require.Contains(t, info.LastError.Message, `"extract"`)
		require.Contains(t, info.LastError.Message, `"classify"`)

		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled,
			history.AttemptStarted, history.StepCompleted, history.StepCompleted, history.TaskReleased,
			history.AttemptStarted, history.AttemptFailed, history.TaskFailed}, eventTypes(events))

		stopWorker(t, second)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestBadInputDeadLettersOnFirstAttempt(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		type document struct {
			Pages int    `json:"pages"`
			URL   string `json:"url"`
		}
		var bodyRuns atomic.Int32
		wf := sdk.NewWorkflow("doc.pages", 1, func(ctx workflow.Context, in document) (int, error) {
			bodyRuns.Add(1)
			return in.Pages, nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		// A caller without the Go type (the CLI, another service) sends the wrong shape.
		bad, err := b.client.StartDynamic(ctx, sdk.TypeRef{Name: "doc.pages", Version: 1}, json.RawMessage(`{"pages": "three"}`), nil)
		require.NoError(t, err)
		good, err := b.client.StartDynamic(ctx, sdk.TypeRef{Name: "doc.pages", Version: 1}, json.RawMessage(`{"pages": 3}`), nil)
		require.NoError(t, err)

		info := waitTask(t, b.client, bad.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, 1, info.Attempt, "bad input is not retried")
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Equal(t, "bad_input", info.LastError.Kind)
		require.JSONEq(t, `{"pages": "three"}`, string(info.Input))
		require.Equal(t, "rule:bad_input", info.LastError.ClassifiedBy)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.AttemptFailed,
			history.TaskDeadLettered}, eventTypes(taskHistory(t, b.client, bad.ID)))

		info = waitTask(t, b.client, good.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		pages, err := sdk.Output[int](info)
		require.NoError(t, err)
		require.Equal(t, 3, pages)
		require.Equal(t, int32(1), bodyRuns.Load(), "the body ran only for the good input")

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestWorkerRunsOnlyRegisteredVersions(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var v1Runs, v2Runs atomic.Int32
		v1 := sdk.NewWorkflow("doc.summarize", 1, func(ctx workflow.Context, in string) (string, error) {
			v1Runs.Add(1)
			return "v1:" + in, nil
		}, nil)
		v2 := sdk.NewWorkflow("doc.summarize", 2, func(ctx workflow.Context, in string) (string, error) {
			v2Runs.Add(1)
			return workflow.Step(ctx, "summarize", func(context.Context) (string, error) { return "v2:" + in, nil }, nil)
		}, nil)
		ctx := context.Background()
		// The v2 task is due before the v1 probe, so the claim that takes the
		// probe would take it too if this worker could run it.
		newer, err := sdk.Start(ctx, b.client, v2, "new", nil)
		require.NoError(t, err)
		probe, err := sdk.Start(ctx, b.client, v1, "old", nil)
		require.NoError(t, err)

		sdk.Register(b.worker, v1)
		startWorker(t, b.worker)
		info := waitTask(t, b.client, probe.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		pending, err := b.client.Get(ctx, newer.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, pending.Status, "a v1-only worker leaves v2 tasks alone")
		require.Zero(t, pending.Attempt)
		require.Equal(t, 2, pending.TypeVersion)
		stopWorker(t, b.worker)

		second := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(second, v2)
		startWorker(t, second)
		info = waitTask(t, b.client, newer.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "v2:new", out)
		require.Equal(t, int32(1), v1Runs.Load())
		require.Equal(t, int32(1), v2Runs.Load())
		require.Equal(t, second.WorkerID(), eventsOf[history.AttemptStartedData](taskHistory(t, b.client, newer.ID))[0].WorkerID)

		stopWorker(t, second)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestGracefulStopReleasesTaskAtNextStep(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		aBlocked, releaseA := make(chan struct{}), make(chan struct{})
		var aRuns, bRuns atomic.Int32
		var mu sync.Mutex
		bWorkers := []string{} // the worker each run of B belonged to
		wf := sdk.NewWorkflow("reply.generate", 1, func(ctx workflow.Context, in string) (string, error) {
			draft, err := workflow.Step(ctx, "A", func(ctx context.Context) (string, error) {
				if aRuns.Add(1) == 1 {
					close(aBlocked)
				}
				select {
				case <-releaseA:
					return "draft:" + in, nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "B", func(ctx context.Context) (string, error) {
				bRuns.Add(1)
				info, _ := activities.GetInfo(ctx)
				mu.Lock()
				bWorkers = append(bWorkers, info.WorkerID)
				mu.Unlock()
				return "sent:" + draft, nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "hi", nil)
		require.NoError(t, err)

		stopWhileStepBlocked(t, b.worker, aBlocked, releaseA)

		// The stopped worker recorded A, did not start B, and released the task.
		info, err := b.client.Get(context.Background(), res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status, "a released task is due again at once")
		require.Empty(t, info.LeaseOwner)
		require.Zero(t, bRuns.Load(), "the stopping worker must not start step B")
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.TaskReleased}, eventTypes(events))
		require.Equal(t, "A", eventsOf[history.StepCompletedData](events)[0].Name)
		released := eventsOf[history.TaskReleasedData](events)[0]
		require.Equal(t, b.worker.WorkerID(), released.WorkerID)

		second := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(second, wf)
		startWorker(t, second)
		info = waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "sent:draft:hi", out, "B got A's recorded output")
		require.Equal(t, int32(1), aRuns.Load(), "A is replayed, not run again")
		require.Equal(t, int32(1), bRuns.Load())
		mu.Lock()
		require.Equal(t, []string{second.WorkerID()}, bWorkers)
		mu.Unlock()
		require.Equal(t, 2, info.Attempt)

		events = taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.TaskReleased, history.AttemptStarted, history.StepCompleted, history.TaskCompleted}, eventTypes(events))
		steps := eventsOf[history.StepCompletedData](events)
		require.Equal(t, []string{"A", "B"}, []string{steps[0].Name, steps[1].Name})
		require.Equal(t, 1, steps[1].Position)
		started := eventsOf[history.AttemptStartedData](events)
		require.Equal(t, b.worker.WorkerID(), started[0].WorkerID)
		require.Equal(t, second.WorkerID(), started[1].WorkerID)

		stopWorker(t, second)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestStepsGetActivityInfo(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{WorkerID: "worker-info"})
		got := make(chan activities.Info, 2)
		wf := sdk.NewWorkflow("info.check", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
			for _, name := range []string{"first", "second"} {
				if _, err := workflow.Step(ctx, name, func(ctx context.Context) (bool, error) {
					info, ok := activities.GetInfo(ctx)
					if !ok {
						return false, activities.Permanent(errors.New("no activity info"))
					}
					got <- info
					return true, nil
				}, nil); err != nil {
					return 0, err
				}
			}
			return ctx.Attempt(), nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, struct{}{}, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		id := res.ID.String()
		for pos, name := range []string{"first", "second"} {
			require.Equal(t, activities.Info{
				TaskID: id, TaskType: "info.check", Attempt: 1, WorkerID: "worker-info", Step: name, Position: pos,
				IdempotencyKey: activity.IdempotencyKey(id, pos, name),
			}, <-got)
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestRegisterSafely(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		noop := func(workflow.Context, string) (string, error) { return "", nil }
		v1 := sdk.NewWorkflow("doc.index", 1, noop, nil)

		require.Error(t, sdk.RegisterSafely[string, string](b.worker, nil))
		require.NoError(t, sdk.RegisterSafely(b.worker, v1))
		err := sdk.RegisterSafely(b.worker, v1)
		require.Error(t, err)
		require.Contains(t, err.Error(), "already registered")
		err = sdk.RegisterSafely(b.worker, sdk.NewWorkflow("doc.index", 1, noop, nil))
		require.Error(t, err, "another definition of the same type and version is a duplicate too")
		require.Contains(t, err.Error(), "doc.index")
		require.NoError(t, sdk.RegisterSafely(b.worker, sdk.NewWorkflow("doc.index", 2, noop, nil)), "a new version is a new type")
		require.NoError(t, sdk.RegisterSafely(b.worker, sdk.NewWorkflow("doc.other", 1, noop, nil)))
		require.Panics(t, func() { sdk.Register(b.worker, v1) })

		startWorker(t, b.worker)
		err = sdk.RegisterSafely(b.worker, sdk.NewWorkflow("doc.late", 1, noop, nil))
		require.Error(t, err)
		require.Contains(t, err.Error(), "started")
		require.Panics(t, func() { sdk.Register(b.worker, sdk.NewWorkflow("doc.late", 1, noop, nil)) })
		require.Error(t, b.worker.Start(context.Background()), "a worker starts once")
		stopWorker(t, b.worker)
		require.NoError(t, b.worker.Stop(context.Background()), "Stop is idempotent")
		require.Error(t, sdk.RegisterSafely(b.worker, sdk.NewWorkflow("doc.late", 1, noop, nil)), "nor after Stop")

		empty := b.newWorker(t, sdk.WorkerConfig{})
		require.Error(t, empty.Start(context.Background()), "a worker with nothing registered has nothing to run")
		require.NoError(t, empty.Stop(context.Background()))

		require.Zero(t, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		require.NoError(t, b.worker.Stop(context.Background()))
		require.NoError(t, b.worker.StopAndCancel(context.Background()))
	})
}

func TestNewWorkflowSafely(t *testing.T) {
	t.Parallel()
	fn := func(workflow.Context, int) (int, error) { return 0, nil }
	valid := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute}
	tests := []struct {
		name    string
		wfName  string
		version int
		fn      func(workflow.Context, int) (int, error)
		opts    sdk.WorkflowOpts
		wantErr string // "" when valid
	}{
		{name: "Valid", wfName: "doc.process", version: 1, fn: fn},
		{name: "ValidOpts", wfName: "doc.process", version: 7, fn: fn, opts: sdk.WorkflowOpts{Queue: "ocr", Retry: &valid}},
		{name: "ValidPunctuation", wfName: "resume.parse:v1-b_c", version: 1, fn: fn},
		{name: "ValidLongest", wfName: strings.Repeat("n", 200), version: 1, fn: fn},
		{name: "EmptyName", wfName: "", version: 1, fn: fn, wantErr: "name"},
		{name: "TooLong", wfName: strings.Repeat("n", 201), version: 1, fn: fn, wantErr: "name"},
		{name: "Space", wfName: "doc process", version: 1, fn: fn, wantErr: "name"},
		{name: "Tab", wfName: "doc\tprocess", version: 1, fn: fn, wantErr: "name"},
		{name: "Newline", wfName: "doc\n", version: 1, fn: fn, wantErr: "name"},
		{name: "NUL", wfName: "doc\x00", version: 1, fn: fn, wantErr: "name"},
		{name: "DEL", wfName: "doc\x7f", version: 1, fn: fn, wantErr: "name"},
		{name: "At", wfName: "doc@2", version: 1, fn: fn, wantErr: "name"},
		{name: "NotASCII", wfName: "résumé", version: 1, fn: fn, wantErr: "name"},
		{name: "Slash", wfName: "../tasks/x/cancel", version: 1, fn: fn, wantErr: "name"},
		{name: "Query", wfName: "doc?x=", version: 1, fn: fn, wantErr: "name"},
		{name: "Fragment", wfName: "doc#x", version: 1, fn: fn, wantErr: "name"},
		{name: "Percent", wfName: "doc%2F", version: 1, fn: fn, wantErr: "name"},
		{name: "DotSegment", wfName: "..", version: 1, fn: fn, wantErr: "name"},
		{name: "LeadingDash", wfName: "-doc", version: 1, fn: fn, wantErr: "name"},
		{name: "ZeroVersion", wfName: "doc", version: 0, fn: fn, wantErr: "version"},
		{name: "NegativeVersion", wfName: "doc", version: -1, fn: fn, wantErr: "version"},
		{name: "NilFunc", wfName: "doc", version: 1, fn: nil, wantErr: "nil"},
		{name: "BadQueue", wfName: "doc", version: 1, fn: fn, opts: sdk.WorkflowOpts{Queue: "ocr queue"}, wantErr: "queue"},
		{name: "NegativeAttempts", wfName: "doc", version: 1, fn: fn, opts: sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: -1}}, wantErr: "MaxAttempts"},
		// Zero fields take the default policy's (RetryPolicy.WithDefaults).
		{name: "ZeroRetry", wfName: "doc", version: 1, fn: fn, opts: sdk.WorkflowOpts{Retry: &activities.RetryPolicy{}}},
		{name: "PartialRetry", wfName: "doc", version: 1, fn: fn, opts: sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3}}},
		{name: "BadMultiplier", wfName: "doc", version: 1, fn: fn, wantErr: "Multiplier",
			opts: sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3, Multiplier: 0.5}}},
		{name: "MaxBelowInitial", wfName: "doc", version: 1, fn: fn, wantErr: "MaxInterval",
			opts: sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3, Multiplier: 2, InitialInterval: time.Minute, MaxInterval: time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wf, err := sdk.NewWorkflowSafely(tt.wfName, tt.version, tt.fn, &tt.opts)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.wfName, wf.TypeName())
				require.Equal(t, tt.version, wf.TypeVersion())
				require.NotPanics(t, func() { sdk.NewWorkflow(tt.wfName, tt.version, tt.fn, &tt.opts) })
				return
			}
			require.Error(t, err)
			require.Nil(t, wf)
			require.Contains(t, err.Error(), tt.wantErr)
			require.Panics(t, func() { sdk.NewWorkflow(tt.wfName, tt.version, tt.fn, &tt.opts) })
		})
	}
}

// When Stop's context ends before running steps finish, Stop cancels them,
// releases their tasks and returns the context's error; StopAndCancel does
// so at once. The cancelled step is not recorded, and runs again elsewhere.
func TestStopCancelsStepsItCannotWaitFor(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		for _, tt := range []struct {
			name    string
			stop    func(ctx context.Context, w *sdk.Worker) error
			wantErr error
		}{
			{name: "StopDeadline", wantErr: context.DeadlineExceeded, stop: func(ctx context.Context, w *sdk.Worker) error {
				ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				return w.Stop(ctx)
			}},
			{name: "StopAndCancel", stop: func(ctx context.Context, w *sdk.Worker) error { return w.StopAndCancel(ctx) }},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, sdk.WorkerConfig{})
				blocked := newSignal()
				var runs atomic.Int32
				wf := sdk.NewWorkflow("llm.generate", 1, func(ctx workflow.Context, in string) (string, error) {
					return workflow.Step(ctx, "generate", func(ctx context.Context) (string, error) {
						if runs.Add(1) == 1 {
							blocked.fire()
							<-ctx.Done() // the first run only ends when cancelled
							return "", ctx.Err()
						}
						return "reply:" + in, nil
					}, nil)
				}, nil)
				sdk.Register(b.worker, wf)
				startWorker(t, b.worker)
				res, err := sdk.Start(context.Background(), b.client, wf, "q", nil)
				require.NoError(t, err)
				select {
				case <-blocked.ch:
				case <-time.After(testTimeout):
					t.Fatal("step never started")
				}

				err = tt.stop(context.Background(), b.worker)
				if tt.wantErr != nil {
					require.True(t, errors.Is(err, tt.wantErr), "got %v", err)
				} else {
					require.NoError(t, err)
				}
				events := taskHistory(t, b.client, res.ID)
				require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.TaskReleased},
					eventTypes(events), "a cancelled step is neither recorded nor a failure")

				second := b.newWorker(t, sdk.WorkerConfig{})
				sdk.Register(second, wf)
				startWorker(t, second)
				info := waitTask(t, b.client, res.ID)
				require.Equal(t, history.StatusCompleted, info.Status)
				require.Equal(t, int32(2), runs.Load())
				stopWorker(t, second)
				enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
			})
		}
	})
}

// A worker that dies abandons its attempts: nothing more is written for
// them, and once the lease expires a rescuer reschedules the task for
// another worker, which resumes after the last recorded step.
func TestAbandonedAttemptGoesToRescuer(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{
			LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RescueInterval: -1,
		})
		blocked := newSignal()
		var fetchRuns, parseRuns atomic.Int32
		wf := sdk.NewWorkflow("feed.import", 1, func(ctx workflow.Context, in string) (string, error) {
			body, err := workflow.Step(ctx, "fetch", func(context.Context) (string, error) {
				fetchRuns.Add(1)
				return "body:" + in, nil
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "parse", func(ctx context.Context) (string, error) {
				if parseRuns.Add(1) == 1 {
					blocked.fire()
					<-ctx.Done()
					return "", ctx.Err()
				}
				return "parsed:" + body, nil
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		require.NoError(t, b.worker.Start(context.Background()))
		res, err := sdk.Start(context.Background(), b.client, wf, "feed", nil)
		require.NoError(t, err)
		select {
		case <-blocked.ch:
		case <-time.After(testTimeout):
			t.Fatal("step never started")
		}
		sdk.AbandonWorker(b.worker)
		stopWorker(t, b.worker) // waits for the abandoned attempt to return
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted},
			eventTypes(events), "an abandoned attempt writes nothing more")

		second := b.newWorker(t, sdk.WorkerConfig{RescueInterval: 50 * time.Millisecond})
		sdk.Register(second, wf)
		startWorker(t, second)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "parsed:body:feed", out)
		require.Equal(t, int32(1), fetchRuns.Load(), "fetch was recorded before the crash")
		require.Equal(t, int32(2), parseRuns.Load())
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.LeaseExpired, history.AttemptStarted, history.StepCompleted, history.TaskCompleted},
			eventTypes(taskHistory(t, b.client, res.ID)))

		stopWorker(t, second)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
