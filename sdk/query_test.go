package sdk_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// progress is what the query "progress" answers.
type progress struct {
	Stage string `json:"stage"`
	Done  int    `json:"done"`
	Note  string `json:"note,omitempty"`
}

// reviewCounts counts the runs of each step of the review workflow.
type reviewCounts struct{ extract, summarize, publish atomic.Int32 }

// reviewWorkflow extracts, summarizes (a step the test holds until
// release closes), awaits an approval, then publishes; its query
// "progress" tells the stage and the steps done, "fail" fails, and
// "sneak" tries to run a step.
func reviewWorkflow(n *reviewCounts, started chan<- struct{}, release <-chan struct{}) *sdk.Workflow[string, string] {
	return sdk.NewWorkflow("query.review", 1, func(ctx workflow.Context, doc string) (string, error) {
		p := progress{Stage: "extracting"}
		if err := workflow.SetQuery(ctx, "progress", func(note string) (progress, error) {
			out := p
			out.Note = note
			return out, nil
		}); err != nil {
			return "", err
		}
		if err := workflow.SetQuery(ctx, "fail", func(struct{}) (int, error) { return 0, errors.New("not today") }); err != nil {
			return "", err
		}
		if err := workflow.SetQuery(ctx, "sneak", func(struct{}) (string, error) {
			return workflow.Step(ctx, "sneak", func(context.Context) (string, error) { n.publish.Add(100); return "x", nil }, nil)
		}); err != nil {
			return "", err
		}
		if _, err := workflow.Step(ctx, "extract", func(context.Context) (string, error) { n.extract.Add(1); return "text", nil }, nil); err != nil {
			return "", err
		}
		p.Stage, p.Done = "summarizing", 1
		if _, err := workflow.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
			n.summarize.Add(1)
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return "summary", nil
		}, nil); err != nil {
			return "", err
		}
		p.Stage, p.Done = "awaiting approval", 2
		d, ok, err := workflow.AwaitApproval(ctx, "approve", time.Hour)
		if err != nil || !ok || !d.Approved {
			return "", errors.New("not approved")
		}
		p.Stage = "publishing"
		if _, err := workflow.Step(ctx, "publish", func(context.Context) (string, error) { n.publish.Add(1); return "ok", nil }, nil); err != nil {
			return "", err
		}
		p.Stage, p.Done = "done", 3
		return "published " + doc, nil
	}, nil)
}

func queryProgress(t *testing.T, c *sdk.Client, id uuid.UUID, note string) progress {
	t.Helper()
	var got progress
	require.NoError(t, c.Query(context.Background(), id, "progress", note, &got))
	return got
}

// TestQueryAnswersAsOfTheLatestEvent: a running task (its step held
// mid-run), one waiting on an approval (no worker holds it) and a
// finished one are answered by replay from the state as of their latest
// event, by a worker through an inquiry (the asking client has no
// worker) or in process; no query runs a step.
func TestQueryAnswersAsOfTheLatestEvent(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var n reviewCounts
		started, release := make(chan struct{}, 1), make(chan struct{})
		wf := reviewWorkflow(&n, started, release)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, wf, "doc-1", nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		local := newClient(t, sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, Worker: b.worker})

		// Running: the worker holds the task, its step held.
		<-started
		require.Equal(t, progress{Stage: "summarizing", Done: 1, Note: "asked"}, queryProgress(t, b.client, run.ID, "asked"))
		require.Equal(t, progress{Stage: "summarizing", Done: 1}, queryProgress(t, local, run.ID, ""))

		// Waiting on its approval: no worker holds it.
		close(release)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		require.Equal(t, progress{Stage: "awaiting approval", Done: 2}, queryProgress(t, b.client, run.ID, ""))
		require.Equal(t, progress{Stage: "awaiting approval", Done: 2}, queryProgress(t, local, run.ID, ""))

		// Errors: an unknown query names those registered; a handler's
		// error; arguments of the wrong type; a handler that tries to run
		// a step runs nothing.
		err = b.client.Query(ctx, run.ID, "stage", nil, nil)
		require.ErrorIs(t, err, sdk.ErrQueryNotFound)
		var nf *sdk.QueryNotFoundError
		require.True(t, errors.As(err, &nf), "%v", err)
		require.Equal(t, []string{"fail", "progress", "sneak"}, nf.Registered)
		require.Contains(t, err.Error(), `"stage"`)
		for _, c := range []*sdk.Client{b.client, local} {
			err = c.Query(ctx, run.ID, "fail", nil, nil)
			require.ErrorIs(t, err, sdk.ErrQueryFailed)
			require.Contains(t, err.Error(), "not today")
			require.ErrorIs(t, c.Query(ctx, run.ID, "progress", map[string]int{"not": 1}, nil), sdk.ErrInvalid)
			err = c.Query(ctx, run.ID, "sneak", nil, nil)
			require.ErrorIs(t, err, sdk.ErrQueryFailed)
			require.Contains(t, err.Error(), "query handler")
		}
		require.ErrorIs(t, b.client.Query(ctx, uuid.New(), "progress", nil, nil), sdk.ErrNotFound)
		require.ErrorIs(t, b.client.Query(ctx, run.ID, "", nil, nil), sdk.ErrInvalid)
		require.ErrorIs(t, b.client.Query(ctx, run.ID, "progress", json.RawMessage(`{"a":`), nil), sdk.ErrInvalid)
		require.ErrorIs(t, b.client.Query(ctx, run.ID, "progress", make([]byte, sdk.MaxQueryArgsBytes), nil), sdk.ErrPayloadTooLarge)

		// Finished: the state at the body's end.
		_, err = b.client.Signal(ctx, run.ID, "approve", workflow.Decision{Approved: true}, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)
		require.Equal(t, progress{Stage: "done", Done: 3}, queryProgress(t, b.client, run.ID, ""))
		var raw json.RawMessage
		require.NoError(t, local.Query(ctx, run.ID, "progress", nil, &raw))
		require.JSONEq(t, `{"stage":"done","done":3}`, string(raw))

		// Every step ran once: by the task, never by a query.
		require.Equal(t, int32(1), n.extract.Load())
		require.Equal(t, int32(1), n.summarize.Load())
		require.Equal(t, int32(1), n.publish.Load())
		require.Equal(t, history.Type("task_completed"), taskHistory(t, b.client, run.ID)[len(taskHistory(t, b.client, run.ID))-1].Type(),
			"a query writes nothing to the history")

		// With the worker stopped, the client that has it answers in
		// process.
		stopWorker(t, b.worker)
		require.Equal(t, progress{Stage: "done", Done: 3}, queryProgress(t, local, run.ID, ""))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// TestQueryWithoutWorker: a task of a type no worker registered is
// refused at once, naming the type; one whose workers are all gone waits
// for the query's timeout, then says none answered.
func TestQueryWithoutWorker(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		nobody := sdk.NewWorkflow("query.nobody", 3, func(workflow.Context, struct{}) (int, error) { return 0, nil }, nil)
		run, err := sdk.Start(ctx, b.client, nobody, struct{}{}, nil)
		require.NoError(t, err)
		err = b.client.Query(ctx, run.ID, "progress", nil, nil)
		require.ErrorIs(t, err, sdk.ErrNoWorker)
		var nw *sdk.NoWorkerError
		require.True(t, errors.As(err, &nw), "%v", err)
		require.Equal(t, sdk.NoWorkerRegistered, nw.Reason)
		require.Equal(t, "no worker of namespace default has registered type query.nobody version 3", err.Error())

		// Registered by a worker that has stopped: nobody answers.
		var n reviewCounts
		wf := reviewWorkflow(&n, make(chan struct{}, 1), make(chan struct{}))
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		stopWorker(t, b.worker)
		review, err := sdk.Start(ctx, b.client, wf, "doc", nil)
		require.NoError(t, err)
		impatient := newClient(t, sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, QueryTimeout: 200 * time.Millisecond})
		err = impatient.Query(ctx, review.ID, "progress", nil, nil)
		require.ErrorIs(t, err, sdk.ErrNoWorker)
		require.True(t, errors.As(err, &nw), "%v", err)
		require.Equal(t, sdk.NoWorkerAnswered, nw.Reason)
		require.Contains(t, err.Error(), "no worker of type query.review version 1 answered within")
		require.Zero(t, n.extract.Load())
	})
}

// TestQueryInquiryIsSealedInEncryptedNamespace: an inquiry's arguments
// and answer are stored through the payload stage, sealed where the
// namespace is encrypted.
func TestQueryInquiryIsSealedInEncryptedNamespace(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		keys := oneKey(t)
		b := setup(t, sdk.WorkerConfig{Keys: keys})
		var n reviewCounts
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		defer close(release)
		wf := reviewWorkflow(&n, started, release)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		c := newClient(t, sdk.ClientConfig{Pool: b.pool, Schema: b.schema, Store: b.store, Keys: keys})
		var asked []uuid.UUID
		sdk.SetOnInquiry(c, func(id uuid.UUID) { asked = append(asked, id) })
		run, err := sdk.Start(ctx, c, wf, "secret", nil)
		require.NoError(t, err)
		startWorker(t, b.worker)
		<-started
		require.Equal(t, progress{Stage: "summarizing", Done: 1, Note: "a secret note"}, queryProgress(t, c, run.ID, "a secret note"))
		require.Len(t, asked, 1)
		in, err := sdk.ClientStore(c).InquiryGet(ctx, &store.InquiryGetParams{ID: asked[0], Namespace: store.DefaultNamespace})
		require.NoError(t, err)
		require.Equal(t, store.InquiryAnswered, in.State)
		require.NotContains(t, string(in.Args), "secret note")
		require.NotContains(t, string(in.Answer), "summarizing")
		require.True(t, history.MaybeSealed(in.Args), "%s", in.Args)
		require.True(t, history.MaybeSealed(in.Answer), "%s", in.Answer)
	})
}
