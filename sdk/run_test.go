package sdk_test

import (
	"context"
	stderrors "errors"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// order is the input of the workflows of the typed-run tests.
type order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// receipt is their output.
type receipt struct {
	OrderID string `json:"order_id"`
	Charged int    `json:"charged"`
}

// charge completes for a positive amount and fails permanently in its
// "charge" step otherwise; skipDeadLetter makes that failure end the task
// failed rather than dead-lettered.
func charge(name string, skipDeadLetter bool) *sdk.Workflow[order, receipt] {
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, o order) (receipt, error) {
		return workflow.Step(ctx, "charge", func(context.Context) (receipt, error) {
			if o.Cents <= 0 {
				return receipt{}, activities.Permanent(errors.Newf("amount %d is not positive", o.Cents))
			}
			return receipt{OrderID: o.ID, Charged: o.Cents}, nil
		}, nil)
	}, &sdk.WorkflowOpts{SkipDeadLetter: skipDeadLetter})
}

// endedRuns starts, on b, a task of each end a task can come to: completed,
// dead-lettered and failed (run by b's worker, which it starts), cancelled
// (before it ran) and expired (past its start deadline, with no worker for
// its queue). It returns their handles once each has ended.
type endedRuns struct {
	completed, deadLettered, failed, cancelled, expired *sdk.Run[receipt]
}

func startEndedRuns(t *testing.T, b *testBundle) endedRuns {
	t.Helper()
	ctx := context.Background()
	dl, fail := charge("shop.charge", false), charge("shop.charge_once", true)
	sdk.Register(b.worker, dl)
	sdk.Register(b.worker, fail)
	start := func(wf *sdk.Workflow[order, receipt], in order, opts *sdk.StartOpts) *sdk.Run[receipt] {
		t.Helper()
		run, err := sdk.Start(ctx, b.client, wf, in, opts)
		require.NoError(t, err)
		return run
	}
	runs := endedRuns{
		completed:    start(dl, order{ID: "o-1", Cents: 250}, nil),
		deadLettered: start(dl, order{ID: "o-2", Cents: -5}, nil),
		failed:       start(fail, order{ID: "o-3", Cents: 0}, nil),
		cancelled:    start(dl, order{ID: "o-4", Cents: 1}, &sdk.StartOpts{Delay: time.Hour}),
	}
	require.NoError(t, b.client.Cancel(ctx, runs.cancelled.ID, "customer changed their mind"))

	startDeadline := time.Now().Add(20 * time.Millisecond)
	runs.expired = start(dl, order{ID: "o-5", Cents: 1}, &sdk.StartOpts{Queue: "nobody-claims", StartDeadline: startDeadline})
	// A leader's start-deadline expirer ends it (its first passes may come
	// before the deadline by the store's clock).
	m, err := sdk.NewMaintainer(sdk.MaintainerConfig{Store: sdk.ClientStore(b.client), Owner: "expirer", Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	require.Equal(t, history.StatusExpired, waitTask(t, b.client, runs.expired.ID).Status)
	m.Stop()
	startWorker(t, b.worker)
	return runs
}

func resultOf[Out any](t *testing.T, run *sdk.Run[Out]) (Out, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return run.Result(ctx)
}

func TestRunResultReturnsTheOutputOrHowTheTaskEnded(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		runs := startEndedRuns(t, b)

		out, err := resultOf(t, runs.completed)
		require.NoError(t, err)
		require.Equal(t, receipt{OrderID: "o-1", Charged: 250}, out)

		for _, tc := range []struct {
			name     string
			run      *sdk.Run[receipt]
			status   history.Status
			sentinel error
			attempt  int
			class    history.Class
			message  string
			step     string
		}{
			{"DeadLettered", runs.deadLettered, history.StatusDeadLettered, sdk.ErrDeadLettered, 1, history.Permanent, "amount -5 is not positive", "charge"},
			{"Failed", runs.failed, history.StatusFailed, sdk.ErrFailed, 1, history.Permanent, "amount 0 is not positive", "charge"},
			{"Cancelled", runs.cancelled, history.StatusCancelled, sdk.ErrCancelled, 0, "", "", ""},
			{"Expired", runs.expired, history.StatusExpired, sdk.ErrExpired, 0, "", "", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, err := resultOf(t, tc.run)
				require.Error(t, err)
				require.Zero(t, out)
				require.True(t, stderrors.Is(err, tc.sentinel), "the standard errors.Is: %v", err)
				require.True(t, errors.Is(err, tc.sentinel), "cockroachdb errors.Is: %v", err)
				for _, other := range []error{sdk.ErrFailed, sdk.ErrDeadLettered, sdk.ErrCancelled, sdk.ErrExpired} {
					if other != tc.sentinel {
						require.False(t, stderrors.Is(err, other), "matches %v too", other)
					}
				}
				var te *sdk.TaskError
				require.True(t, stderrors.As(err, &te), "the standard errors.As finds the TaskError")
				require.Equal(t, tc.run.ID, te.TaskID)
				require.Equal(t, tc.status, te.Status)
				require.Equal(t, tc.attempt, te.Attempt)
				require.Equal(t, tc.class, te.Class)
				require.Equal(t, tc.message, te.Message)
				require.Equal(t, tc.step, te.Step)
				require.Contains(t, err.Error(), string(tc.status))
				require.Contains(t, err.Error(), tc.message)
				if tc.message != "" {
					require.Equal(t, tc.class, te.LastError.Class)
					require.Contains(t, err.Error(), `step "charge"`)
				}

				// sdk.Output on the finished task says the same.
				info, err := tc.run.Info(context.Background())
				require.NoError(t, err)
				_, err = sdk.Output[receipt](info)
				require.True(t, stderrors.Is(err, tc.sentinel), "Output: %v", err)
			})
		}
	})
}

func TestRunOfMakesAHandleOnAKnownTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := charge("shop.charge", false)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		started, err := b.client.StartMany(ctx, []sdk.StartParams{
			sdk.StartEntry(wf, order{ID: "o-1", Cents: 3}, nil),
			sdk.StartEntry(wf, order{ID: "o-2", Cents: 4}, &sdk.StartOpts{IdempotencyKey: "o-2"}),
		})
		require.NoError(t, err)
		startWorker(t, b.worker)

		for i, want := range []receipt{{"o-1", 3}, {"o-2", 4}} {
			out, err := resultOf(t, sdk.RunOf(b.client, wf, started[i].ID))
			require.NoError(t, err)
			require.Equal(t, want, out)
		}
		again, err := sdk.Start(ctx, b.client, wf, order{ID: "o-2", Cents: 4}, &sdk.StartOpts{IdempotencyKey: "o-2"})
		require.NoError(t, err)
		require.True(t, again.Existing)
		require.Equal(t, started[1].ID, again.ID)

		// A handle of another workflow type refuses the task: its output
		// is not that type's.
		other := sdk.NewWorkflow("shop.refund", 1, func(workflow.Context, order) (string, error) { return "", nil }, nil)
		_, err = sdk.RunOf(b.client, other, started[0].ID).Result(ctx)
		require.True(t, stderrors.Is(err, sdk.ErrInvalid), "%v", err)
		require.ErrorContains(t, err, "shop.charge, not shop.refund")
		_, err = sdk.RunOf(b.client, other, started[0].ID).Info(ctx)
		require.True(t, stderrors.Is(err, sdk.ErrInvalid), "%v", err)

		_, err = sdk.RunOf(b.client, wf, uuid.New()).Result(ctx)
		require.True(t, stderrors.Is(err, sdk.ErrNotFound), "%v", err)
	})
}

// A Result whose context ends before the task does returns the context's
// error, not a TaskError.
func TestRunResultStopsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setupEmbedded(t, sdk.WorkerConfig{})
	run, err := sdk.Start(context.Background(), b.client, echo, "later", &sdk.StartOpts{Delay: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = run.Result(ctx)
	require.True(t, stderrors.Is(err, context.Canceled), "%v", err)
	var te *sdk.TaskError
	require.False(t, stderrors.As(err, &te))
}
