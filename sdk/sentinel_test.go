package sdk_test

import (
	"context"
	"encoding/json"
	stderrors "errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// driverText is what an error of the sdk must not say: the words of a
// database driver leaking through a sentinel's message.
var driverText = []string{"sql:", "no rows", "pgx", "SQLSTATE", "sqlite"}

// TestEverySentinelMatchesWithBothErrorLibraries provokes each exported
// sentinel error of package sdk for real, on each store, and checks that
// the standard library's errors.Is sees it as well as cockroachdb's, and
// that the message is cairn's own, not the driver's. A sentinel added to
// the package must be added here: the table is checked against the list.
func TestEverySentinelMatchesWithBothErrorLibraries(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		c := b.client
		runs := startEndedRuns(t, b) // also starts the worker
		// Cancelling it below must meet a completed task, not one still
		// pending (which the cancel would stop).
		_, err := resultOf(t, runs.completed)
		require.NoError(t, err)
		pending, err := sdk.Start(ctx, c, echo, "waits", &sdk.StartOpts{Delay: time.Hour, IdempotencyKey: "key-1"})
		require.NoError(t, err)
		require.NoError(t, c.SetQueue(ctx, "tight", sdk.QueueSettings{MaxWaiting: 1}))
		_, err = sdk.Start(ctx, c, echo, "fills", &sdk.StartOpts{Queue: "tight", Delay: time.Hour})
		require.NoError(t, err)
		stingy, err := sdk.NewClient(sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store,
			FilterLimits: sdk.FilterLimits{Cost: 1}})
		require.NoError(t, err)
		t.Cleanup(stingy.Close)
		inPlace, err := sdk.NewClient(sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, BlobThreshold: -1})
		require.NoError(t, err)
		t.Cleanup(inPlace.Close)
		missing := uuid.New()
		// A task waiting for its approval, for a worker whose code added a
		// step before it (ErrStranded).
		recorder := b.newWorker(t, sdk.WorkerConfig{})
		sdk.Register(recorder, approvalV1(false))
		startWorker(t, recorder)
		review, err := sdk.Start(ctx, c, approvalV1(false), 1, nil)
		require.NoError(t, err)
		waitForEvent(t, c, review.ID, history.WaitStarted)
		stopWorker(t, recorder)
		bounded := boundedClient(t, b, store.HistoryLimits{MaxEvents: 1})
		// Clients whose workers of this process replay the review for its
		// queries: with a failing query, and with code that parts from its
		// history.
		queried := func(wf *sdk.Workflow[int, int]) *sdk.Client {
			w := b.newWorker(t, sdk.WorkerConfig{})
			sdk.Register(w, wf)
			return newClient(t, sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, Worker: w})
		}
		askable, diverging := queried(approvalQueried()), queried(approvalV1(true))
		// A task of a worker of its own, whose update handler fails.
		updater := b.newWorker(t, sdk.WorkerConfig{})
		failing := sdk.NewWorkflow("sentinel.updated", 1, func(ctx workflow.Context, _ int) (int, error) {
			if err := workflow.SetUpdate(ctx, "boom", func(workflow.Context, int) (int, error) { return 0, errors.New("no update today") }, nil); err != nil {
				return 0, err
			}
			_, _, err := workflow.Receive[int](ctx, "never", time.Hour)
			return 0, err
		}, nil)
		sdk.Register(updater, failing)
		startWorker(t, updater)
		updated, err := sdk.Start(ctx, c, failing, 1, nil)
		require.NoError(t, err)
		waitForEvent(t, c, updated.ID, history.WaitStarted)
		// A task waiting over its budget, raised once by its link: its
		// worker stops first, so the task stays raised, not run.
		spender := b.newWorker(t, sdk.WorkerConfig{})
		over := llmSteps("sentinel.budget", nil)
		sdk.Register(spender, over)
		startWorker(t, spender)
		overBudget, err := sdk.Start(ctx, c, over, 2, &sdk.StartOpts{
			Budget: &sdk.Budget{USD: 0.05, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}})
		require.NoError(t, err)
		waitForEvent(t, c, overBudget.ID, history.BudgetRefused)
		stopWorker(t, spender)
		link, err := c.BudgetCallback(ctx, overBudget.ID, time.Now().Add(time.Hour), "ops")
		require.NoError(t, err)
		_, err = c.RaiseBudgetByCallback(ctx, link, "")
		require.NoError(t, err)

		cases := []struct {
			sentinel error
			name     string
			provoke  func() error
		}{
			{sdk.ErrNotFound, "Get", func() error { _, err := c.Get(ctx, missing); return err }},
			{sdk.ErrNotFound, "Wait", func() error { _, err := c.Wait(ctx, missing); return err }},
			{sdk.ErrNotFound, "History", func() error { _, err := c.History(ctx, missing); return err }},
			{sdk.ErrNotFound, "Cancel", func() error { return c.Cancel(ctx, missing, "why") }},
			{sdk.ErrNotFound, "Retry", func() error { return c.Retry(ctx, missing, "why") }},
			{sdk.ErrNotFound, "Compensate", func() error { return c.Compensate(ctx, missing, "why") }},
			{sdk.ErrNotFound, "Result", func() error { _, err := sdk.RunOf(c, echo, missing).Result(ctx); return err }},
			{sdk.ErrTaskState, "RetryPending", func() error { return c.Retry(ctx, pending.ID, "why") }},
			{sdk.ErrTaskState, "CancelCompleted", func() error { return c.Cancel(ctx, runs.completed.ID, "why") }},
			{sdk.ErrTaskState, "CompensatePending", func() error { return c.Compensate(ctx, pending.ID, "why") }},
			{sdk.ErrTaskState, "OutputOfPending", func() error {
				info, err := c.Get(ctx, pending.ID)
				require.NoError(t, err)
				_, err = sdk.Output[string](info)
				return err
			}},
			{sdk.ErrHistoryFull, "Signal", func() error { _, err := bounded.Signal(ctx, pending.ID, "note", nil, nil); return err }},
			{sdk.ErrQueueFull, "Start", func() error {
				_, err := sdk.Start(ctx, c, echo, "over", &sdk.StartOpts{Queue: "tight"})
				return err
			}},
			{sdk.ErrPayloadTooLarge, "Start", func() error {
				_, err := sdk.Start(ctx, inPlace, echo, strings.Repeat("x", sdk.DefaultMaxPayloadBytes), nil)
				return err
			}},
			{sdk.ErrBlobCorrupt, "GetBlob", func() error {
				ref := putPlainBlob(t, sdk.ClientStore(c), "default", pending.ID, "", []byte("page"))
				ref.SHA256 = strings.Repeat("0", 64) // a reference the bytes do not match
				_, err = c.GetBlob(ctx, ref)
				return err
			}},
			{sdk.ErrIdempotencyKeyReused, "Start", func() error {
				_, err := sdk.Start(ctx, c, echo, "another input", &sdk.StartOpts{IdempotencyKey: "key-1"})
				return err
			}},
			{sdk.ErrIdempotencyKeyReused, "StartMany", func() error {
				_, err := c.StartMany(ctx, []sdk.StartParams{sdk.StartEntry(echo, "other", &sdk.StartOpts{IdempotencyKey: "key-1"})})
				return err
			}},
			{sdk.ErrInvalid, "Queue", func() error {
				_, err := sdk.Start(ctx, c, echo, "x", &sdk.StartOpts{Queue: "no spaces"})
				return err
			}},
			{sdk.ErrInvalid, "RawInput", func() error {
				_, err := c.StartDynamic(ctx, echo, json.RawMessage(`{"a":`), nil)
				return err
			}},
			{sdk.ErrInvalid, "RunOfAnotherType", func() error {
				_, err := sdk.RunOf(c, echo, runs.completed.ID).Info(ctx)
				return err
			}},
			{sdk.ErrUnknownType, "RegisteredType", func() error { _, err := c.RegisteredType(ctx, "nobody.registered", 1); return err }},
			{sdk.ErrBadFilter, "CompileTaskFilter", func() error { _, err := sdk.CompileTaskFilter(`task.labels[`); return err }},
			{sdk.ErrBadFilter, "CompileEventFilter", func() error { _, err := sdk.CompileEventFilter(`event.nope == 1`); return err }},
			{sdk.ErrFilterEvaluation, "Audit", func() error {
				// task_scheduled has no error: the filter fails on it.
				f, err := sdk.CompileEventFilter(`event.data.error.status == 429`)
				require.NoError(t, err)
				return c.Audit(ctx, sdk.AuditParams{Filter: f}, func(sdk.AuditRecord) error { return nil })
			}},
			{sdk.ErrFilterTooExpensive, "List", func() error {
				f, err := sdk.CompileTaskFilter(`task.type == "echo" && task.queue == "default"`)
				require.NoError(t, err)
				_, err = stingy.List(ctx, &sdk.ListOpts{Filter: f})
				return err
			}},
			{sdk.ErrDeadLettered, "Result", func() error { _, err := runs.deadLettered.Result(ctx); return err }},
			{sdk.ErrFailed, "Result", func() error { _, err := runs.failed.Result(ctx); return err }},
			{sdk.ErrCancelled, "Result", func() error { _, err := runs.cancelled.Result(ctx); return err }},
			{sdk.ErrExpired, "Result", func() error { _, err := runs.expired.Result(ctx); return err }},
			{sdk.ErrWaitEnded, "SignalForWaitOfFinished", func() error {
				_, err := c.Signal(ctx, runs.completed.ID, "approve", nil, &sdk.SignalOpts{ForWait: new(0)})
				return err
			}},
			{sdk.ErrWaitNotReached, "SignalForWaitNotReached", func() error {
				_, err := c.Signal(ctx, pending.ID, "approve", nil, &sdk.SignalOpts{ForWait: new(0)})
				return err
			}},
			{sdk.ErrStranded, "WorkerStart", func() error {
				w := b.newWorker(t, sdk.WorkerConfig{DeployCheck: sdk.DeployCheckConfig{Policy: sdk.DeployRefuse}})
				sdk.Register(w, approvalV1(true))
				return w.Start(ctx)
			}},
			{sdk.ErrQueryNotFound, "Query", func() error { return askable.Query(ctx, review.ID, "nope", nil, nil) }},
			{sdk.ErrQueryFailed, "Query", func() error { return askable.Query(ctx, review.ID, "fail", nil, nil) }},
			{sdk.ErrReplayFailed, "Query", func() error { return diverging.Query(ctx, review.ID, "fail", nil, nil) }},
			{sdk.ErrNoWorker, "Query", func() error {
				nobody := sdk.NewWorkflow("nobody.queried", 1, func(workflow.Context, int) (int, error) { return 0, nil }, nil)
				run, err := sdk.Start(ctx, c, nobody, 1, nil)
				require.NoError(t, err)
				return c.Query(ctx, run.ID, "progress", nil, nil)
			}},
			{sdk.ErrUpdateRejected, "Update", func() error { _, err := askable.Update(ctx, review.ID, "strict", 1, nil); return err }},
			{sdk.ErrUpdateNotFound, "Update", func() error { _, err := askable.Update(ctx, review.ID, "nope", 1, nil); return err }},
			{sdk.ErrUpdateFailed, "Update", func() error { _, err := c.Update(ctx, updated.ID, "boom", 1, nil); return err }},
			{sdk.ErrUpdatePending, "Update", func() error {
				// Accepted, and no worker runs the review to apply it.
				short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				_, err := askable.Update(short, review.ID, "strict", 2, nil)
				return err
			}},
			{sdk.ErrNotPlaced, "NewClient", func() error {
				cells, err := sdk.NewCells(map[string]store.Store{"eu": sdk.ClientStore(c)}, map[string]string{"acme": "eu"})
				require.NoError(t, err)
				_, err = sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: "initech"})
				return err
			}},
			{sdk.ErrCallbackUsed, "RaiseBudgetByCallback", func() error {
				_, err := c.RaiseBudgetByCallback(ctx, link, "")
				return err
			}},
			{sdk.ErrClaimLost, "HeartbeatRemote", func() error {
				_, err := c.HeartbeatRemote(ctx, missing.String()+".0.feedface", nil)
				return err
			}},
			{sdk.ErrNotReady, "WorkerReady", func() error {
				w, err := sdk.NewWorker(sdk.WorkerConfig{Store: sdk.ClientStore(c)})
				require.NoError(t, err)
				return w.Ready(ctx) // not started
			}},
			{sdk.ErrNotWaitingOnBudget, "BudgetCallback", func() error {
				_, err := c.BudgetCallback(ctx, pending.ID, time.Now().Add(time.Hour), "ops")
				return err
			}},
			{sdk.ErrBadCallbackToken, "ParseCallbackToken", func() error {
				_, err := sdk.ParseCallbackToken([]byte("a callback secret of 16+ bytes"), "forged", time.Now())
				return err
			}},
			{sdk.ErrCallbackExpired, "ParseCallbackToken", func() error {
				secret := []byte("a callback secret of 16+ bytes")
				token, err := sdk.CallbackToken(secret, sdk.Callback{Namespace: "default", TaskID: missing, Name: "approve", Expires: time.Unix(1, 0)})
				require.NoError(t, err)
				_, err = sdk.ParseCallbackToken(secret, token, time.Now())
				return err
			}},
		}
		covered := map[error]bool{}
		for _, tc := range cases {
			covered[tc.sentinel] = true
			t.Run(sentinelName(tc.sentinel)+"/"+tc.name, func(t *testing.T) {
				err := tc.provoke()
				require.Error(t, err)
				t.Log(err)
				require.True(t, stderrors.Is(err, tc.sentinel), "the standard errors.Is does not match: %v", err)
				require.True(t, errors.Is(err, tc.sentinel), "cockroachdb errors.Is does not match: %v", err)
				for _, text := range []string{err.Error(), errors.FlattenDetails(err)} {
					for _, leak := range driverText {
						require.NotContains(t, strings.ToLower(text), strings.ToLower(leak), "driver text in %q", text)
					}
				}
			})
		}
		for _, s := range exportedSentinels {
			require.True(t, covered[s], "sentinel %q is not provoked by the table", s)
		}
	})
}

// exportedSentinels is every exported Err* of package sdk.
// TestExportedSentinelsAreListed keeps it whole.
var exportedSentinels = map[string]error{
	"ErrNotFound": sdk.ErrNotFound, "ErrTaskState": sdk.ErrTaskState, "ErrQueueFull": sdk.ErrQueueFull,
	"ErrHistoryFull":          sdk.ErrHistoryFull,
	"ErrIdempotencyKeyReused": sdk.ErrIdempotencyKeyReused, "ErrInvalid": sdk.ErrInvalid,
	"ErrUnknownType": sdk.ErrUnknownType, "ErrBadFilter": sdk.ErrBadFilter,
	"ErrFilterEvaluation": sdk.ErrFilterEvaluation, "ErrFilterTooExpensive": sdk.ErrFilterTooExpensive,
	"ErrDeadLettered": sdk.ErrDeadLettered, "ErrCancelled": sdk.ErrCancelled, "ErrFailed": sdk.ErrFailed,
	"ErrExpired": sdk.ErrExpired, "ErrPayloadTooLarge": sdk.ErrPayloadTooLarge, "ErrBlobCorrupt": sdk.ErrBlobCorrupt,
	"ErrBadCallbackToken": sdk.ErrBadCallbackToken, "ErrCallbackExpired": sdk.ErrCallbackExpired,
	"ErrWaitEnded": sdk.ErrWaitEnded, "ErrWaitNotReached": sdk.ErrWaitNotReached,
	"ErrNotPlaced": sdk.ErrNotPlaced, "ErrStranded": sdk.ErrStranded,
	"ErrQueryNotFound": sdk.ErrQueryNotFound, "ErrQueryFailed": sdk.ErrQueryFailed, "ErrNoWorker": sdk.ErrNoWorker,
	"ErrReplayFailed":   sdk.ErrReplayFailed,
	"ErrUpdateRejected": sdk.ErrUpdateRejected, "ErrUpdateNotFound": sdk.ErrUpdateNotFound,
	"ErrUpdateFailed": sdk.ErrUpdateFailed, "ErrUpdatePending": sdk.ErrUpdatePending,
	"ErrCallbackUsed": sdk.ErrCallbackUsed, "ErrNotWaitingOnBudget": sdk.ErrNotWaitingOnBudget,
	"ErrClaimLost": sdk.ErrClaimLost, "ErrNotReady": sdk.ErrNotReady,
}

// approvalQueried is approvalV1(false) with a query that fails.
func approvalQueried() *sdk.Workflow[int, int] {
	return sdk.NewWorkflow("dc.review", 1, func(ctx workflow.Context, in int) (int, error) {
		if err := workflow.SetQuery(ctx, "fail", func(struct{}) (int, error) { return 0, errors.New("no answer today") }); err != nil {
			return 0, err
		}
		if err := workflow.SetUpdate(ctx, "strict", func(workflow.Context, int) (int, error) { return 0, nil },
			&workflow.UpdateOpts[int]{Validator: func(n int) error {
				if n < 2 {
					return errors.Newf("%d is too small", n)
				}
				return nil
			}}); err != nil {
			return 0, err
		}
		if _, err := workflow.Step(ctx, "extract", one, nil); err != nil {
			return 0, err
		}
		if _, _, err := workflow.AwaitApproval(ctx, "approve", time.Hour); err != nil {
			return 0, err
		}
		return in, nil
	}, nil)
}

// boundedClient is a client of b's database through a store of its own,
// with limits.
func boundedClient(t *testing.T, b *testBundle, limits store.HistoryLimits) *sdk.Client {
	t.Helper()
	var st store.Store
	if lite, ok := b.store.(*sqlitestore.Store); ok {
		s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: lite.Path(), HistoryLimits: limits})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		st = s
	} else {
		s, err := pgstore.New(pgstore.Config{Pool: b.pool, Schema: b.schema, HistoryLimits: limits})
		require.NoError(t, err)
		st = s
	}
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func sentinelName(err error) string {
	for name, s := range exportedSentinels {
		if s == err {
			return name
		}
	}
	return "unlisted"
}

// TestExportedSentinelsAreListed reads the package's source for exported
// variables named Err*, so that a new sentinel cannot miss the table.
func TestExportedSentinelsAreListed(t *testing.T) {
	t.Parallel()
	sources, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var declared []string
	for _, path := range sources {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") && name.IsExported() {
						declared = append(declared, name.Name)
					}
				}
			}
		}
	}
	listed := make([]string, 0, len(exportedSentinels))
	for name := range exportedSentinels {
		listed = append(listed, name)
	}
	sort.Strings(declared)
	sort.Strings(listed)
	require.Equal(t, declared, listed, "exportedSentinels must list every exported Err* of package sdk")
}
