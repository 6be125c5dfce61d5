package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

type testBundle struct {
	client *sdk.Client
	worker *sdk.Worker
	pool   *pgxpool.Pool
	schema string
	store  store.Store // the embedded store, when the bundle is on it; nil on PostgreSQL
}

// setupFunc makes a test's client and worker on one store.
type setupFunc func(t *testing.T, cfg sdk.WorkerConfig) *testBundle

// onEachStore runs test as two parallel subtests, on PostgreSQL and on the
// embedded SQLite store: the SDK's behaviour must not depend on the store.
func onEachStore(t *testing.T, test func(t *testing.T, setup setupFunc)) {
	t.Helper()
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		test(t, setup)
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, setupEmbedded)
	})
}

// setupEmbedded is setup on a fresh embedded store of the test's own.
func setupEmbedded(t *testing.T, cfg sdk.WorkerConfig) *testBundle {
	t.Helper()
	store := enginetest.SQLiteStore(t)
	client, err := sdk.NewClient(sdk.ClientConfig{Store: store})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	cfg.Store = store
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	worker, err := sdk.NewWorker(cfg)
	require.NoError(t, err)
	return &testBundle{client: client, worker: worker, store: store}
}

func setup(t *testing.T, cfg sdk.WorkerConfig) *testBundle {
	t.Helper()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(client.Close) // its wait listener
	cfg.Pool, cfg.Schema = pool, schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	worker, err := sdk.NewWorker(cfg)
	require.NoError(t, err)
	return &testBundle{client: client, worker: worker, pool: pool, schema: schema}
}

func TestWorkflowRetriesFailedStepWithoutRerunningEarlierSteps(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var ocrRuns, extractRuns, validateRuns atomic.Int32
		retry := activities.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Millisecond, Multiplier: 2, MaxInterval: 10 * time.Millisecond}
		wf := sdk.NewWorkflow("doc.process", 1, func(ctx workflow.Context, in string) (string, error) {
			text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
				ocrRuns.Add(1)
				info, ok := activities.GetInfo(ctx)
				if !ok || info.IdempotencyKey == "" {
					return "", errors.New("no activity info")
				}
				return "text:" + in, nil
			}, nil)
			if err != nil {
				return "", err
			}
			fields, err := workflow.Step(ctx, "extract", func(ctx context.Context) (string, error) {
				if extractRuns.Add(1) == 1 {
					return "", errors.New("llm 503")
				}
				return "fields:" + text, nil
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "validate", func(ctx context.Context) (string, error) {
				validateRuns.Add(1)
				return "ok:" + fields, nil
			}, nil)
		}, &sdk.WorkflowOpts{Retry: &retry})
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.NoError(t, b.worker.Start(ctx))
		defer func() { require.NoError(t, b.worker.Stop(ctx)) }()

		res, err := sdk.Start(ctx, b.client, wf, "a", nil)
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		info, err := b.client.Wait(waitCtx, res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, info.Status)
		out, err := sdk.Output[string](info)
		require.NoError(t, err)
		require.Equal(t, "ok:fields:text:a", out)
		require.Equal(t, int32(1), ocrRuns.Load())
		require.Equal(t, int32(2), extractRuns.Load())
		require.Equal(t, int32(1), validateRuns.Load())
		require.Equal(t, 2, info.Attempt)
		events, err := b.client.History(ctx, res.ID)
		require.NoError(t, err)
		var types []history.Type
		for _, e := range events {
			types = append(types, e.Type())
		}
		require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
			history.AttemptFailed, history.AttemptStarted, history.StepCompleted, history.StepCompleted,
			history.TaskCompleted}, types)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}
