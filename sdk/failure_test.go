package sdk_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// httpPolicy is the policy docs/workflows.md recommends for HTTP APIs.
var httpPolicy = activities.MustPolicy("http", "error.status == 429 || error.status >= 500")

func TestPolicyRetries429And503ButNot400(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		retry := fastRetry(3)
		retry.Classifier = httpPolicy
		var mu sync.Mutex
		runs := map[int]int{}
		wf := sdk.NewWorkflow("crm.push", 1, func(ctx workflow.Context, status int) (string, error) {
			return workflow.Step(ctx, "push", func(context.Context) (string, error) {
				mu.Lock()
				runs[status]++
				mu.Unlock()
				return "", activities.WithStatus(errors.Newf("crm answered %d", status), status)
			}, nil)
		}, &sdk.WorkflowOpts{Retry: retry})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ids := map[int]uuid.UUID{}
		for _, status := range []int{429, 503, 400} {
			res, err := sdk.Start(context.Background(), b.client, wf, status, nil)
			require.NoError(t, err)
			ids[status] = res.ID
		}
		for status, wantRuns := range map[int]int{429: 3, 503: 3, 400: 1} {
			info := waitTask(t, b.client, ids[status])
			require.Equal(t, history.StatusDeadLettered, info.Status, "status %d", status)
			require.Equal(t, wantRuns, info.Attempt, "status %d", status)
			require.Equal(t, status, info.LastError.Status)
			require.Equal(t, "policy:http", info.LastError.ClassifiedBy)
			require.Equal(t, httpPolicy.Expression(), info.LastError.Policy)
			mu.Lock()
			require.Equal(t, wantRuns, runs[status], "status %d", status)
			mu.Unlock()
			for _, f := range eventsOf[history.AttemptFailedData](taskHistory(t, b.client, ids[status])) {
				require.Equal(t, status, f.Error.Status)
				require.Equal(t, "policy:http", f.Error.ClassifiedBy, "every attempt_failed says what classified it")
			}
		}
		wantClass := map[int]history.Class{429: history.Transient, 503: history.Transient, 400: history.Permanent}
		for status, class := range wantClass {
			info, err := b.client.Get(context.Background(), ids[status])
			require.NoError(t, err)
			require.Equal(t, class, info.LastError.Class, "status %d", status)
		}

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestStepPolicyOverridesTheWorkflows(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		typeRetry := fastRetry(5)
		typeRetry.Classifier = activities.MustPolicy("never", "false")
		stepRetry := fastRetry(2)
		stepRetry.Classifier = activities.MustPolicy("timeouts", `error.kind == "timeout"`)
		var runs atomic.Int32
		wf := sdk.NewWorkflow("llm.summarize", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "call_model", func(context.Context) (string, error) {
				runs.Add(1)
				return "", activities.WithKind(errors.New("model did not answer"), "timeout")
			}, &workflow.StepOpts{Retry: stepRetry})
		}, &sdk.WorkflowOpts{Retry: typeRetry})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		res, err := sdk.Start(context.Background(), b.client, wf, "doc", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, int32(2), runs.Load(), "the step's policy and budget apply, not the type's")
		require.Equal(t, "policy:timeouts", info.LastError.ClassifiedBy)
		require.Equal(t, history.Transient, info.LastError.Class)
		dead := eventsOf[history.TaskDeadLetteredData](taskHistory(t, b.client, res.ID))
		require.Contains(t, dead[0].Reason, "retries exhausted: attempt 2 of 2")

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestRetryAfterHintIsHonoured(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		const hint = 300 * time.Millisecond
		var runs atomic.Int32
		wf := sdk.NewWorkflow("llm.embed", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "embed", func(context.Context) (string, error) {
				if runs.Add(1) == 1 {
					return "", activities.RetryAfter(activities.WithStatus(errors.New("rate limited"), 429), hint)
				}
				return "vector", nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		res, err := sdk.Start(context.Background(), b.client, wf, "doc", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)

		events := taskHistory(t, b.client, res.ID)
		var failedAt, secondStart time.Time
		var failed history.AttemptFailedData
		for _, e := range events {
			switch p := e.Data.(type) {
			case history.AttemptFailedData:
				failed, failedAt = p, e.At
			case history.AttemptStartedData:
				if e.Attempt == 2 {
					secondStart = e.At
				}
			}
		}
		require.NotNil(t, failed.NextRunAt)
		require.Equal(t, hint.Milliseconds(), failed.Error.RetryAfterMillis)
		require.Equal(t, "mark:retry_after", failed.Error.ClassifiedBy)
		// The hint replaces the millisecond backoff of fastRetry: the retry is
		// scheduled a hint after the failure was decided, which is a moment
		// before the event was written; the second attempt does not begin
		// before it.
		require.Greater(t, failed.NextRunAt.Sub(failedAt), hint-50*time.Millisecond)
		require.LessOrEqual(t, failed.NextRunAt.Sub(failedAt), hint)
		require.False(t, secondStart.Before(*failed.NextRunAt), "attempt 2 began at %s, before %s", secondStart, failed.NextRunAt)

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestExhaustedTimeBudgetDeadLetters(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		retry := &activities.RetryPolicy{MaxAttempts: 1000, MaxElapsed: 300 * time.Millisecond,
			InitialInterval: 50 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second, Jitter: activities.NoJitter}
		var runs atomic.Int32
		wf := sdk.NewWorkflow("ocr.page", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
				runs.Add(1)
				return "", errors.New("ocr service unavailable")
			}, nil)
		}, &sdk.WorkflowOpts{Retry: retry})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		res, err := sdk.Start(context.Background(), b.client, wf, "page-1", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		// Backoffs of 50, 100, 200 ms: the third retry would start past 300 ms.
		require.LessOrEqual(t, info.Attempt, 3, "the budget, not MaxAttempts, ended it")
		events := taskHistory(t, b.client, res.ID)
		dead := eventsOf[history.TaskDeadLetteredData](events)
		require.Len(t, dead, 1)
		require.Contains(t, dead[0].Reason, "retry budget exhausted")
		var first time.Time
		for _, e := range events {
			if e.Type() == history.AttemptStarted && first.IsZero() {
				first = e.At
			}
			if f, ok := e.Data.(history.AttemptFailedData); ok && f.NextRunAt != nil {
				require.LessOrEqual(t, f.NextRunAt.Sub(first), retry.MaxElapsed, "a retry was scheduled past the budget")
			}
		}

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestRequeuedTaskRunsAgainAndCompletes(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var parserFixed atomic.Bool
		wf := sdk.NewWorkflow("doc.parse", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "parse", func(context.Context) (string, error) {
				if !parserFixed.Load() {
					return "", activities.Permanent(activities.WithKind(errors.New("unsupported PDF version"), "bad_document"))
				}
				return "parsed", nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "scan.pdf", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, 1, info.Attempt)

		// Retrying a task that is not dead-lettered, or does not exist, says so.
		err = b.client.Retry(ctx, uuid.Must(uuid.NewV7()), "typo")
		require.True(t, errors.Is(err, sdk.ErrNotFound), "%v", err)

		parserFixed.Store(true)
		require.NoError(t, b.client.Retry(ctx, res.ID, "parser fixed in v2.3"))
		info = waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		require.Equal(t, 2, info.Attempt, "the attempt count goes on after a requeue")
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "parsed", out)

		err = b.client.Retry(ctx, res.ID, "again")
		require.True(t, errors.Is(err, sdk.ErrTaskState), "%v", err)
		require.ErrorContains(t, err, "it is completed")

		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.AttemptFailed,
			history.TaskDeadLettered, history.TaskRequeued, history.AttemptStarted, history.StepCompleted,
			history.TaskCompleted}, eventTypes(events))
		requeue := eventsOf[history.TaskRequeuedData](events)[0]
		require.Equal(t, "parser fixed in v2.3", requeue.Reason)
		require.Contains(t, requeue.By, "sdk@", "the client's identity is recorded")

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestRetryDeadLettersByFilter(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var recovered atomic.Bool
		wf := sdk.NewWorkflow("crm.sync", 1, func(ctx workflow.Context, status int) (int, error) {
			return workflow.Step(ctx, "sync", func(context.Context) (int, error) {
				if recovered.Load() {
					return status, nil
				}
				return 0, activities.Permanent(activities.WithStatus(errors.Newf("crm %d", status), status))
			}, nil)
		}, &sdk.WorkflowOpts{Retry: fastRetry(1)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		ctx := context.Background()
		ids := map[int]uuid.UUID{}
		for _, status := range []int{503, 503, 401} {
			res, err := sdk.Start(ctx, b.client, wf, status, &sdk.StartOpts{IdempotencyKey: "k" + strconv.Itoa(len(ids))})
			require.NoError(t, err)
			waitTask(t, b.client, res.ID)
			if status == 503 && ids[503] != uuid.Nil {
				ids[504] = res.ID // the second 503
				continue
			}
			ids[status] = res.ID
		}
		_, err := sdk.CompileTaskFilter("error.status = 503")
		require.True(t, errors.Is(err, sdk.ErrBadFilter), "%v", err)
		require.ErrorContains(t, err, "1:14")

		filter, err := sdk.CompileTaskFilter(`error.status == 503 && task.type == "crm.sync"`)
		require.NoError(t, err)
		listed, err := b.client.DeadLetters(ctx, &sdk.DeadLetterOpts{Filter: filter})
		require.NoError(t, err)
		require.Len(t, listed, 2)

		recovered.Store(true)
		report, err := b.client.RetryDeadLetters(ctx, "crm back up", &sdk.DeadLetterOpts{Filter: filter, Limit: -1})
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{ids[503], ids[504]}, report.Retried)
		require.Empty(t, report.Failed)
		for _, id := range []uuid.UUID{ids[503], ids[504]} {
			require.Equal(t, history.StatusCompleted, waitTask(t, b.client, id).Status)
		}
		info, err := b.client.Get(ctx, ids[401])
		require.NoError(t, err)
		require.Equal(t, history.StatusDeadLettered, info.Status, "the filter left the 401 alone")

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestHeartbeatTimeoutFailsTheAttemptTransiently(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var runs atomic.Int32
		wf := sdk.NewWorkflow("ocr.large", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
				if runs.Add(1) == 1 {
					<-ctx.Done() // hangs, never heartbeats
					return "", ctx.Err()
				}
				activities.Heartbeat(ctx)
				return "text", nil
			}, &workflow.StepOpts{HeartbeatTimeout: 100 * time.Millisecond})
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)

		res, err := sdk.Start(context.Background(), b.client, wf, "book.pdf", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, info.Status)
		require.Equal(t, 2, info.Attempt)
		failed := eventsOf[history.AttemptFailedData](taskHistory(t, b.client, res.ID))
		require.Len(t, failed, 1)
		require.Equal(t, activities.KindHeartbeatTimeout, failed[0].Error.Kind)
		require.Equal(t, history.Transient, failed[0].Error.Class)
		require.Equal(t, "ocr", failed[0].Error.Step)

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestScheduleToCloseDeadline(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("reply.send", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "send", func(context.Context) (string, error) {
				return "", errors.New("smtp 451")
			}, nil)
		}, &sdk.WorkflowOpts{
			Retry: &activities.RetryPolicy{MaxAttempts: 10, InitialInterval: time.Minute, Multiplier: 2, MaxInterval: time.Hour,
				Jitter: activities.NoJitter}, // the first retry is a minute away, past the 2s deadline
			ScheduleToClose: time.Hour,
		})
		sdk.Register(b.worker, wf)

		ctx := context.Background()
		// Started with a deadline that passes before any worker runs it.
		late, err := sdk.Start(ctx, b.client, wf, "late", &sdk.StartOpts{Deadline: time.Now().Add(50 * time.Millisecond)})
		require.NoError(t, err)
		// Within the type's hour, but its first retry (up to a minute away) is
		// scheduled past a deadline two seconds out.
		soon, err := sdk.Start(ctx, b.client, wf, "soon", &sdk.StartOpts{Deadline: time.Now().Add(2 * time.Second)})
		require.NoError(t, err)
		typed, err := b.client.Get(ctx, soon.ID)
		require.NoError(t, err)
		require.NotNil(t, typed.Deadline)

		_, err = sdk.Start(ctx, b.client, wf, "bad", &sdk.StartOpts{Delay: time.Hour, Deadline: time.Now().Add(time.Minute)})
		require.ErrorContains(t, err, "is not after the task's run time")

		time.Sleep(100 * time.Millisecond) // let late's deadline pass before any worker claims it
		startWorker(t, b.worker)

		info := waitTask(t, b.client, late.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, "schedule_to_close_timeout", info.LastError.Kind)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.AttemptFailed,
			history.TaskDeadLettered}, eventTypes(taskHistory(t, b.client, late.ID)))

		err = b.client.Retry(ctx, late.ID, "try anyway")
		require.True(t, errors.Is(err, sdk.ErrTaskState), "%v", err)
		require.ErrorContains(t, err, "deadline")
		_, err = sdk.Start(ctx, b.client, wf, "past", &sdk.StartOpts{Deadline: time.Now().Add(-time.Hour)})
		require.ErrorContains(t, err, "is not after the task's run time")

		info = waitTask(t, b.client, soon.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, 1, info.Attempt)
		dead := eventsOf[history.TaskDeadLetteredData](taskHistory(t, b.client, soon.ID))
		require.Contains(t, dead[0].Reason, "deadline")

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func TestInvalidRetryPolicyIsRefusedAtDefinition(t *testing.T) {
	t.Parallel()
	noop := func(workflow.Context, string) (string, error) { return "", nil }
	_, err := sdk.NewWorkflowSafely("x.bad", 1, noop, &sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: -1}})
	require.ErrorContains(t, err, "MaxAttempts -1 must be at least 1")
	// A partial policy is whole: its zero fields take the defaults (it
	// panicked on Multiplier 0 before).
	_, err = sdk.NewWorkflowSafely("x.partial", 1, noop, &sdk.WorkflowOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3}})
	require.NoError(t, err)
	_, err = sdk.NewWorkflowSafely("x.bad", 1, noop, &sdk.WorkflowOpts{Retry: &activities.RetryPolicy{
		MaxAttempts: 3, Multiplier: 2, MaxElapsed: -time.Second}})
	require.ErrorContains(t, err, "must not be negative")
	_, err = sdk.NewWorkflowSafely("x.bad", 1, noop, &sdk.WorkflowOpts{ScheduleToClose: -time.Second})
	require.ErrorContains(t, err, "ScheduleToClose")
}

func TestBadStepOptionsArePermanent(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var runs atomic.Int32
		wf := sdk.NewWorkflow("x.opts", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "s", func(context.Context) (string, error) {
				runs.Add(1)
				return "", nil
			}, &workflow.StepOpts{StartToClose: -time.Second})
		}, &sdk.WorkflowOpts{Retry: fastRetry(5)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, 1, info.Attempt)
		require.Equal(t, "bad_step_options", info.LastError.Kind)
		require.Zero(t, runs.Load(), "a step with bad options never runs")
		stopWorker(t, b.worker)
	})
}

func TestStepRetryWithoutClassifierKeepsTheTypesPolicy(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		typeRetry := fastRetry(5)
		typeRetry.Classifier = activities.MustPolicy("never", "false")
		var runs atomic.Int32
		wf := sdk.NewWorkflow("llm.classify", 1, func(ctx workflow.Context, _ string) (string, error) {
			return workflow.Step(ctx, "call_model", func(context.Context) (string, error) {
				runs.Add(1)
				return "", errors.New("model error")
			}, &workflow.StepOpts{Retry: fastRetry(3)}) // a budget of its own, no policy
		}, &sdk.WorkflowOpts{Retry: typeRetry})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "doc", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, int32(1), runs.Load(), "the type's policy says permanent")
		require.Equal(t, "policy:never", info.LastError.ClassifiedBy)
		stopWorker(t, b.worker)
	})
}

// The body failing after its last step counts against the budget of what
// follows that step, not the step's own (used-up) budget.
func TestBodyErrorAfterARetriedStepGetsAFreshBudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var stepRuns, bodyRuns atomic.Int32
		wf := sdk.NewWorkflow("doc.finish", 1, func(ctx workflow.Context, _ string) (string, error) {
			out, err := workflow.Step(ctx, "fetch", func(context.Context) (string, error) {
				if stepRuns.Add(1) < 3 {
					return "", errors.New("fetch failed")
				}
				return "data", nil
			}, nil)
			if err != nil {
				return "", err
			}
			bodyRuns.Add(1)
			return "", activities.Transient(errors.Newf("index not ready for %s", out))
		}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		res, err := sdk.Start(context.Background(), b.client, wf, "doc", nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.Equal(t, int32(3), stepRuns.Load(), "fetch succeeded on its third attempt and was not run again")
		require.Equal(t, int32(3), bodyRuns.Load(), "what follows fetch had a budget of three attempts of its own")
		require.Equal(t, 5, info.Attempt)
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
