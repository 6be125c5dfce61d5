package sdk_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// echo is a workflow for client tests; most of them never run it.
var echo = sdk.NewWorkflow("echo", 1, func(_ workflow.Context, in string) (string, error) { return in, nil }, nil)

func (b *testBundle) newClient(t *testing.T, namespace string) *sdk.Client {
	t.Helper()
	c, err := sdk.NewClient(sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, Namespace: namespace})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestStartWithIdempotencyKeyStartsOnce(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		opts := sdk.StartOpts{IdempotencyKey: "webhook-123"}

		first, err := sdk.Start(ctx, b.client, echo, "first", &opts)
		require.NoError(t, err)
		require.False(t, first.Existing)
		second, err := sdk.Start(ctx, b.client, echo, "first", &opts)
		require.NoError(t, err)
		require.True(t, second.Existing)
		require.Equal(t, first.ID, second.ID)
		_, err = sdk.Start(ctx, b.client, echo, "second", &opts)
		require.True(t, errors.Is(err, sdk.ErrIdempotencyKeyReused), "another input: %v", err)

		info, err := b.client.Get(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, "webhook-123", info.IdempotencyKey)
		require.JSONEq(t, `"first"`, string(info.Input), "the second start changed nothing")
		tasks, err := b.client.List(ctx, nil)
		require.NoError(t, err)
		require.Len(t, tasks, 1)

		// Keys are unique per namespace, and a task without a key never collides.
		other, err := sdk.Start(ctx, b.newClient(t, "tenant-b"), echo, "other", &opts)
		require.NoError(t, err)
		require.False(t, other.Existing)
		require.NotEqual(t, first.ID, other.ID)
		noKey1, err := sdk.Start(ctx, b.client, echo, "x", nil)
		require.NoError(t, err)
		noKey2, err := sdk.Start(ctx, b.client, echo, "x", nil)
		require.NoError(t, err)
		require.NotEqual(t, noKey1.ID, noKey2.ID)
		require.False(t, noKey2.Existing)

		require.Equal(t, 4, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestStartTxRolledBackLeavesNoTask(t *testing.T) {
	t.Parallel()
	b := setup(t, sdk.WorkerConfig{})
	ctx := context.Background()

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := sdk.StartTx(ctx, b.client, tx, echo, "never", nil)
	require.NoError(t, err)
	_, err = b.client.Get(ctx, rolledBack.ID)
	require.True(t, errors.Is(err, sdk.ErrNotFound), "an uncommitted task is invisible outside its transaction, got %v", err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = b.client.Get(ctx, rolledBack.ID)
	require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)
	_, err = b.client.History(ctx, rolledBack.ID)
	require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	committed, err := sdk.StartTx(ctx, b.client, tx, echo, "kept", &sdk.StartOpts{IdempotencyKey: "order-7"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	info, err := b.client.Get(ctx, committed.ID)
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, info.Status)
	require.JSONEq(t, `"kept"`, string(info.Input))

	// A committed task runs like any other.
	sdk.Register(b.worker, echo)
	startWorker(t, b.worker)
	info = waitTask(t, b.client, committed.ID)
	require.Equal(t, history.StatusCompleted, info.Status)
	stopWorker(t, b.worker)

	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
}

func TestGetOtherNamespacesTaskIsNotFound(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		tenantA, tenantB := b.newClient(t, "tenant-a"), b.newClient(t, "tenant-b")
		res, err := sdk.Start(ctx, tenantA, echo, "secret", nil)
		require.NoError(t, err)

		info, err := tenantA.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, "tenant-a", info.Namespace)

		_, err = tenantB.Get(ctx, res.ID)
		require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)
		_, err = b.client.Get(ctx, res.ID)
		require.True(t, errors.Is(err, sdk.ErrNotFound), "the default namespace does not see it either, got %v", err)
		_, err = tenantB.History(ctx, res.ID)
		require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)
		waitCtx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		_, err = tenantB.Wait(waitCtx, res.ID)
		require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)
		_, err = tenantA.Get(ctx, uuid.New())
		require.True(t, errors.Is(err, sdk.ErrNotFound), "got %v", err)

		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestListFiltersByStatusAndType(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		ocr := sdk.NewWorkflow("doc.ocr", 1, func(_ workflow.Context, in string) (string, error) { return "ocr:" + in, nil }, nil)
		reply := sdk.NewWorkflow("mail.reply", 1, func(_ workflow.Context, in string) (string, error) { return in, nil }, nil)

		var started []uuid.UUID // in start order
		for i, wf := range []sdk.WorkflowRef{ocr, reply, ocr, reply, reply} {
			res, err := b.client.StartDynamic(ctx, wf, string(rune('a'+i)), nil)
			require.NoError(t, err)
			started = append(started, res.ID)
		}
		_, err := sdk.Start(ctx, b.newClient(t, "elsewhere"), ocr, "z", nil)
		require.NoError(t, err)

		// Only doc.ocr runs, so its tasks complete and mail.reply stays pending.
		sdk.Register(b.worker, ocr)
		startWorker(t, b.worker)
		waitTask(t, b.client, started[0])
		waitTask(t, b.client, started[2])
		stopWorker(t, b.worker)

		ids := func(opts sdk.ListOpts) []uuid.UUID {
			t.Helper()
			tasks, err := b.client.List(ctx, &opts)
			require.NoError(t, err)
			out := []uuid.UUID{}
			for _, task := range tasks {
				require.Equal(t, "default", task.Namespace)
				if opts.Status != "" {
					require.Equal(t, opts.Status, task.Status)
				}
				if opts.Type != "" {
					require.Equal(t, opts.Type, task.Type)
				}
				out = append(out, task.ID)
			}
			return out
		}
		newestFirst := []uuid.UUID{started[4], started[3], started[2], started[1], started[0]}
		require.Equal(t, newestFirst, ids(sdk.ListOpts{}), "every task of the namespace, newest first")
		require.Equal(t, newestFirst, ids(sdk.ListOpts{}))
		require.Equal(t, []uuid.UUID{started[2], started[0]}, ids(sdk.ListOpts{Status: history.StatusCompleted}))
		require.Equal(t, []uuid.UUID{started[4], started[3], started[1]}, ids(sdk.ListOpts{Status: history.StatusPending}))
		require.Equal(t, []uuid.UUID{started[4], started[3], started[1]}, ids(sdk.ListOpts{Type: "mail.reply"}))
		require.Equal(t, []uuid.UUID{started[2], started[0]}, ids(sdk.ListOpts{Type: "doc.ocr", Status: history.StatusCompleted}))
		require.Empty(t, ids(sdk.ListOpts{Type: "doc.ocr", Status: history.StatusPending}))
		require.Empty(t, ids(sdk.ListOpts{Status: history.StatusFailed}))
		require.Empty(t, ids(sdk.ListOpts{Type: "no.such.type"}))
		require.Equal(t, []uuid.UUID{started[4], started[3]}, ids(sdk.ListOpts{Limit: 2}))
		require.Equal(t, []uuid.UUID{started[4]}, ids(sdk.ListOpts{Type: "mail.reply", Limit: 1}))

		require.Equal(t, 6, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestWaitReturnsContextErrorWhenNobodyRunsTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, echo, "orphan", nil)
		require.NoError(t, err)

		waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = b.client.Wait(waitCtx, res.ID)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)

		cancelled, cancelNow := context.WithCancel(ctx)
		cancelNow()
		_, err = b.client.Wait(cancelled, res.ID)
		require.True(t, errors.Is(err, context.Canceled), "got %v", err)

		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusPending, info.Status)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestStartOptsAreRecorded(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		wf := sdk.NewWorkflow("doc.queue", 3, func(_ workflow.Context, in int) (int, error) { return in, nil },
			&sdk.WorkflowOpts{Queue: "ocr", Retry: fastRetry(4)})
		runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)

		byDefault, err := sdk.Start(ctx, b.client, wf, 1, nil)
		require.NoError(t, err)
		info, err := b.client.Get(ctx, byDefault.ID)
		require.NoError(t, err)
		require.Equal(t, "doc.queue", info.Type)
		require.Equal(t, 3, info.TypeVersion)
		require.Equal(t, "ocr", info.Queue, "the workflow's queue")
		require.Equal(t, 4, info.MaxAttempts, "the workflow's retry policy")
		require.Equal(t, history.StatusPending, info.Status)
		require.JSONEq(t, `1`, string(info.Input))

		overridden, err := sdk.Start(ctx, b.client, wf, 2, &sdk.StartOpts{
			Queue: "urgent", Priority: 5, RunAt: runAt, MaxAttempts: 9, TraceID: "trace-1",
		})
		require.NoError(t, err)
		info, err = b.client.Get(ctx, overridden.ID)
		require.NoError(t, err)
		require.Equal(t, "urgent", info.Queue)
		require.Equal(t, 5, info.Priority)
		require.True(t, runAt.Equal(info.RunAt), "run at %s, want %s", info.RunAt, runAt)
		require.Equal(t, 9, info.MaxAttempts)
		require.Equal(t, "trace-1", info.TraceID)

		// A name-only reference gets the default queue and retry limits.
		byRef, err := b.client.StartDynamic(ctx, sdk.TypeRef{Name: "doc.queue", Version: 3}, json.RawMessage(`{"raw": true}`), nil)
		require.NoError(t, err)
		info, err = b.client.Get(ctx, byRef.ID)
		require.NoError(t, err)
		require.Equal(t, "default", info.Queue)
		require.JSONEq(t, `{"raw": true}`, string(info.Input))

		require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

func TestStartRejectsInvalidRequests(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		for name, start := range map[string]func() (sdk.StartResult, error){
			"NilWorkflow": func() (sdk.StartResult, error) { return b.client.StartDynamic(ctx, nil, "x", nil) },
			"EmptyName":   func() (sdk.StartResult, error) { return b.client.StartDynamic(ctx, sdk.TypeRef{Version: 1}, "x", nil) },
			"NameWithAt": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, sdk.TypeRef{Name: "a@1", Version: 1}, "x", nil)
			},
			"ZeroVersion": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, sdk.TypeRef{Name: "echo"}, "x", nil)
			},
			"NegativeMax": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, echo, "x", &sdk.StartOpts{MaxAttempts: -1})
			},
			"InvalidRawJSON": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, echo, json.RawMessage(`{"a":`), nil)
			},
			"UnencodableJSON": func() (sdk.StartResult, error) { return b.client.StartDynamic(ctx, echo, make(chan int), nil) },
			"BadQueue": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, echo, "x", &sdk.StartOpts{Queue: "ocr queue"})
			},
			"LongKey": func() (sdk.StartResult, error) {
				return b.client.StartDynamic(ctx, echo, "x", &sdk.StartOpts{IdempotencyKey: strings.Repeat("k", 513)})
			},
		} {
			_, err := start()
			require.Error(t, err, name)
		}
		_, err := sdk.Start(ctx, b.client, echo, "x", &sdk.StartOpts{IdempotencyKey: strings.Repeat("k", 512)})
		require.NoError(t, err, "a 512-byte key is allowed")
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)), "nothing else was created")
	})
}

func TestOutputOfUnfinishedTask(t *testing.T) {
	t.Parallel()
	_, err := sdk.Output[string](&sdk.TaskInfo{ID: uuid.New(), Status: history.StatusRunning})
	require.Error(t, err)
	out, err := sdk.Output[*string](&sdk.TaskInfo{Status: history.StatusCompleted})
	require.NoError(t, err)
	require.Nil(t, out, "a completed task without output decodes to the zero value")
	_, err = sdk.Output[int](&sdk.TaskInfo{Status: history.StatusCompleted, Output: json.RawMessage(`"text"`)})
	require.Error(t, err)
}

func TestStartManyInsertsInOrderAndHonoursIdempotencyKeys(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		wf := sdk.TypeRef{Name: "doc.batch", Version: 1}
		first, err := b.client.StartDynamic(ctx, wf, "earlier", &sdk.StartOpts{IdempotencyKey: "taken"})
		require.NoError(t, err)

		res, err := b.client.StartMany(ctx, []sdk.StartParams{
			{Workflow: wf, Input: "a"},
			{Workflow: wf, Input: "earlier", Opts: sdk.StartOpts{IdempotencyKey: "taken"}},
			{Workflow: wf, Input: "c", Opts: sdk.StartOpts{IdempotencyKey: "twice"}},
			{Workflow: wf, Input: "c", Opts: sdk.StartOpts{IdempotencyKey: "twice", Priority: 9}},
			{Workflow: wf, Input: "e", Opts: sdk.StartOpts{Queue: "other", Priority: 3}},
		})
		require.NoError(t, err)
		require.Len(t, res, 5)
		require.False(t, res[0].Existing)
		require.Equal(t, sdk.StartResult{ID: first.ID, Existing: true}, res[1], "a key taken before the batch")
		require.False(t, res[2].Existing)
		require.Equal(t, sdk.StartResult{ID: res[2].ID, Existing: true}, res[3], "a key taken earlier in the same batch")
		require.False(t, res[4].Existing)

		for i, want := range map[int]string{0: `"a"`, 2: `"c"`, 4: `"e"`} {
			info, err := b.client.Get(ctx, res[i].ID)
			require.NoError(t, err)
			require.JSONEq(t, want, string(info.Input), "start %d", i)
		}
		info, err := b.client.Get(ctx, res[4].ID)
		require.NoError(t, err)
		require.Equal(t, "other", info.Queue)
		require.Equal(t, 3, info.Priority)

		// A bad start anywhere refuses the whole batch before anything is written.
		_, err = b.client.StartMany(ctx, []sdk.StartParams{{Workflow: wf, Input: "f"}, {Workflow: sdk.TypeRef{Name: "bad name", Version: 1}}})
		require.Error(t, err)
		tasks, err := b.client.List(ctx, &sdk.ListOpts{Type: "doc.batch", Limit: 100})
		require.NoError(t, err)
		require.Len(t, tasks, 4, "earlier + a + c + e")
		require.Equal(t, 4, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}
