package sdk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// summary is what the document workflow returns: the document handed on
// by reference, and what was read from it.
type summary struct {
	Doc    sdk.Blob `json:"doc"`
	Size   int      `json:"size"`
	SHA256 string   `json:"sha256"`
}

// fetchParams say which document to fetch.
type fetchParams struct{ Size, Seed int }

// documentWorkflow fetches a document (step 1 keeps it as a blob), reads
// it (step 2) and checks it again (step 3): the document goes from step to
// step by reference.
var documentWorkflow = sdk.NewWorkflow("doc.pipeline", 1, func(ctx workflow.Context, in fetchParams) (summary, error) {
	doc, err := workflow.Step(ctx, "fetch", func(ctx context.Context) (sdk.Blob, error) {
		return activities.PutBlob(ctx, "application/pdf", document(in.Size, in.Seed))
	}, nil)
	if err != nil {
		return summary{}, err
	}
	digest, err := workflow.Step(ctx, "read", func(ctx context.Context) (string, error) {
		data, err := activities.GetBlob(ctx, doc)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]), nil
	}, nil)
	if err != nil {
		return summary{}, err
	}
	n, err := workflow.Step(ctx, "check", func(ctx context.Context) (int, error) {
		data, err := activities.GetBlob(ctx, doc)
		return len(data), err
	}, nil)
	return summary{Doc: doc, Size: n, SHA256: digest}, err
}, nil)

// rereadWorkflow reads a blob in a step.
var rereadWorkflow = sdk.NewWorkflow("doc.reread", 1, func(ctx workflow.Context, doc sdk.Blob) (int, error) {
	return workflow.Step(ctx, "reread", func(ctx context.Context) (int, error) {
		data, err := activities.GetBlob(ctx, doc)
		return len(data), err
	}, nil)
}, nil)

// document is size bytes of a fake PDF, different per seed.
func document(size, seed int) []byte {
	doc := bytes.Repeat([]byte{byte(seed), 0x25, 0x50, 0x44, 0x46, 0, 0xff, 0x0a}, size/8+1)
	return doc[:size]
}

// A 20 MB document passes through a 3-step workflow by reference: the
// steps hand on a blob reference, the history holds under 10 KB more than
// the same workflow over a 10-byte document, the client reads the
// document back, and a damaged blob is an error naming the blob and task,
// never wrong bytes. On both stores.
func TestLargeDocumentPassesThroughStepsByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		const size = 20 << 20
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		sdk.Register(b.worker, documentWorkflow)
		sdk.Register(b.worker, rereadWorkflow)
		startWorker(t, b.worker)
		ctx := context.Background()

		historyBytes := func(id uuid.UUID) int {
			t.Helper()
			evs, err := b.client.History(ctx, id)
			require.NoError(t, err)
			n := 0
			for _, e := range evs {
				data, err := history.Encode(e.Data)
				require.NoError(t, err)
				n += len(data)
			}
			return n
		}
		run := func(in fetchParams) (uuid.UUID, summary) {
			t.Helper()
			res, err := sdk.Start(ctx, b.client, documentWorkflow, in, nil)
			require.NoError(t, err)
			out, err := res.Result(ctx)
			require.NoError(t, err)
			return res.ID, out
		}
		smallRun, smallOut := run(fetchParams{Size: 10, Seed: 1})
		require.Equal(t, 10, smallOut.Size)
		bigRun, out := run(fetchParams{Size: size, Seed: 2})
		require.Equal(t, size, out.Size)
		sum := sha256.Sum256(document(size, 2))
		require.Equal(t, hex.EncodeToString(sum[:]), out.SHA256)
		require.Equal(t, out.SHA256, out.Doc.SHA256)
		t.Logf("history JSON: %d bytes for the 10-byte document, %d for the 20 MB one", historyBytes(smallRun), historyBytes(bigRun))
		require.Less(t, historyBytes(bigRun)-historyBytes(smallRun), 10<<10,
			"the history of the 20 MB run is within 10 KB of the 10-byte run's")
		require.Less(t, historyBytes(bigRun), 10<<10, "and small itself")
		if b.pool != nil { // what the rows take in the events table, headers and indexes' keys aside
			var rowBytes int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT sum(pg_column_size(e.*)) FROM `+b.schema+`.events AS e WHERE task_id = $1`,
				bigRun).Scan(&rowBytes))
			t.Logf("events rows of the 20 MB run: %d bytes", rowBytes)
			require.Less(t, rowBytes, 10<<10)
		}

		data, err := b.client.GetBlob(ctx, out.Doc)
		require.NoError(t, err)
		require.True(t, bytes.Equal(document(size, 2), data))

		corrupt(t, b, out.Doc.Key)
		_, err = b.client.GetBlob(ctx, out.Doc)
		require.ErrorIs(t, err, payload.ErrBlobCorrupt)
		require.ErrorContains(t, err, "blob "+out.Doc.Key+" of task "+bigRun.String()+" is damaged")

		// A step reading the damaged blob fails at once, permanently, naming
		// itself, the task and the blob.
		res, err := sdk.Start(ctx, b.client, rereadWorkflow, out.Doc, nil)
		require.NoError(t, err)
		_, err = res.Result(ctx)
		require.Error(t, err)
		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.NotNil(t, info.LastError)
		require.Equal(t, "blob_corrupt", info.LastError.Kind)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Contains(t, info.LastError.Message, `step "reread" (position 0) of task `+res.ID.String())
		require.Contains(t, info.LastError.Message, "blob "+out.Doc.Key+" of task "+bigRun.String()+" is damaged")
		stopWorker(t, b.worker)
	})
}

// corrupt flips a byte in the middle of a stored blob.
func corrupt(t *testing.T, b *testBundle, key string) {
	t.Helper()
	ctx := context.Background()
	const flip = `SET data = substr(data, 1, 1000) || X'00' || substr(data, 1002)`
	if lite, ok := b.store.(*sqlitestore.Store); ok {
		_, err := lite.DB().ExecContext(ctx, `UPDATE blobs `+flip+` WHERE key = ?`, key)
		require.NoError(t, err)
		return
	}
	_, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.blobs SET data = overlay(data PLACING '\x00'::bytea FROM 1001 FOR 1) WHERE key = $1`, key)
	require.NoError(t, err)
}

// A step output over the worker's blob threshold is kept as a blob: the
// history records the reference, the next attempt replays the output read
// back, History reads it back and RawHistory shows the reference. On both
// stores.
func TestLargeStepOutputsAreKeptByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2, BlobThreshold: 1000})
		var tries atomic.Int32
		wf := sdk.NewWorkflow("ocr.pages", 1, func(ctx workflow.Context, pages int) (int, error) {
			text, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
				return strings.Repeat("lorem ipsum ", pages*100), nil
			}, nil)
			if err != nil {
				return 0, err
			}
			return workflow.Step(ctx, "count", func(context.Context) (int, error) {
				if tries.Add(1) == 1 {
					return 0, activities.Transient(errors.New("model busy"))
				}
				return len(text), nil
			}, &workflow.StepOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond}})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, 20, nil)
		require.NoError(t, err)
		n, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, len(strings.Repeat("lorem ipsum ", 2000)), n, "the retried attempt replayed the output read back")
		require.Equal(t, int32(2), tries.Load())

		raw, err := b.client.RawHistory(ctx, res.ID)
		require.NoError(t, err)
		resolved, err := b.client.History(ctx, res.ID)
		require.NoError(t, err)
		var kept, small int
		for i, e := range raw {
			step, ok := e.Data.(history.StepCompletedData)
			if !ok {
				continue
			}
			got := resolved[i].Data.(history.StepCompletedData)
			require.Nil(t, got.OutputRef, "History reads references back")
			if step.OutputRef == nil {
				small++
				require.Equal(t, step.Output, got.Output)
				continue
			}
			kept++
			require.Empty(t, step.Output)
			require.Equal(t, int64(len(got.Output)), step.OutputRef.Size)
			require.Equal(t, `"`+strings.Repeat("lorem ipsum ", 2000)+`"`, string(got.Output))
		}
		require.Equal(t, 1, kept, "the OCR text is kept by reference")
		require.Equal(t, 1, small, "the count stays in the history")
		stopWorker(t, b.worker)
	})
}

// A workflow's output over the threshold is kept as a blob: task_completed
// holds {"cairn_blob": ref}, while Get, Result and History read the output
// back, and a parent awaiting the child gets the output itself. On both
// stores.
func TestLargeWorkflowOutputsAreKeptByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, BlobThreshold: 1000})
		report := sdk.NewWorkflow("report.render", 1, func(ctx workflow.Context, n int) (string, error) {
			return strings.Repeat("row ", n), nil
		}, nil)
		digest := sdk.NewWorkflow("report.digest", 1, func(ctx workflow.Context, n int) (int, error) {
			out, err := workflow.StartChild(ctx, report, n, nil).Result(ctx)
			return len(out), err
		}, nil)
		sdk.Register(b.worker, report)
		sdk.Register(b.worker, digest)
		startWorker(t, b.worker)
		ctx := context.Background()

		res, err := sdk.Start(ctx, b.client, report, 5000, nil)
		require.NoError(t, err)
		out, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("row ", 5000), out, "Result reads the blob back")
		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, `"`+strings.Repeat("row ", 5000)+`"`, string(info.Output))

		raw, err := b.client.RawHistory(ctx, res.ID)
		require.NoError(t, err)
		done := raw[len(raw)-1].Data.(history.TaskCompletedData)
		ref, ok := history.ParseBlobEnvelope(done.Output)
		require.True(t, ok, "task_completed keeps the reference: %s", done.Output)
		require.Equal(t, int64(len(info.Output)), ref.Size)
		resolved, err := b.client.History(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, info.Output, resolved[len(resolved)-1].Data.(history.TaskCompletedData).Output)

		byRef, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), OutputsByReference: true})
		require.NoError(t, err)
		t.Cleanup(byRef.Close)
		linked, err := byRef.Get(ctx, res.ID)
		require.NoError(t, err)
		require.JSONEq(t, string(done.Output), string(linked.Output), "OutputsByReference answers the reference")

		small, err := sdk.Start(ctx, b.client, report, 3, nil)
		require.NoError(t, err)
		_, err = small.Result(ctx)
		require.NoError(t, err)
		raw, err = b.client.RawHistory(ctx, small.ID)
		require.NoError(t, err)
		require.Equal(t, `"row row row "`, string(raw[len(raw)-1].Data.(history.TaskCompletedData).Output), "under the threshold: in place")

		parent, err := sdk.Start(ctx, b.client, digest, 4000, nil)
		require.NoError(t, err)
		n, err := parent.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 4*4000, n, "the parent read its child's output back")
	})
}

// An input over the client's blob threshold goes by reference: the blob
// is written with the task, task_scheduled records {"cairn_blob": ref},
// and every attempt reads the input back; a keyed start of the same input
// is the same task, of another input a reuse; Get and History read it
// back. On both stores.
func TestLargeInputsAreKeptByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		var attempts atomic.Int32
		wf := sdk.NewWorkflow("doc.index", 1, func(ctx workflow.Context, doc string) (int, error) {
			return workflow.Step(ctx, "index", func(context.Context) (int, error) {
				if attempts.Add(1) == 1 {
					return 0, activities.Transient(errors.New("index busy"))
				}
				return len(doc), nil
			}, &workflow.StepOpts{Retry: &activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond}})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		doc := strings.Repeat("scanned page text ", 1_200_000) // about 21 MB

		res, err := sdk.Start(ctx, b.client, wf, doc, &sdk.StartOpts{IdempotencyKey: "doc-1"})
		require.NoError(t, err)
		n, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, len(doc), n, "the step saw the whole input")
		require.Equal(t, int32(2), attempts.Load(), "the retry read the input back too")

		raw, err := b.client.RawHistory(ctx, res.ID)
		require.NoError(t, err)
		sched := raw[0].Data.(history.TaskScheduledData)
		ref, ok := history.ParseBlobEnvelope(sched.Input)
		require.True(t, ok, "task_scheduled keeps the reference")
		require.Equal(t, int64(len(doc)+2), ref.Size)
		encoded, err := json.Marshal(raw)
		require.NoError(t, err)
		require.Less(t, len(encoded), 10_000, "the history holds a reference, not 21 MB")
		info, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, `"`+doc+`"`, string(info.Input))
		events, err := b.client.History(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, info.Input, events[0].Data.(history.TaskScheduledData).Input)

		again, err := sdk.Start(ctx, b.client, wf, doc, &sdk.StartOpts{IdempotencyKey: "doc-1"})
		require.NoError(t, err)
		require.True(t, again.Existing, "the same input is the same start, whatever blob key it got")
		require.Equal(t, res.ID, again.ID)
		_, err = sdk.Start(ctx, b.client, wf, doc+"!", &sdk.StartOpts{IdempotencyKey: "doc-1"})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A signal payload over the client's blob threshold, to a task named by
// id, goes by reference: signal_received records {"cairn_blob": ref} and
// the workflow receives the payload itself; a payload shaped like the
// reference is refused at the edge. On both stores.
func TestLargeSignalPayloadsAreKeptByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 2})
		wf := sdk.NewWorkflow("doc.review", 1, func(ctx workflow.Context, _ string) (int, error) {
			note, _, err := workflow.Receive[string](ctx, "annotated", time.Minute)
			return len(note), err
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "doc", nil)
		require.NoError(t, err)
		note := strings.Repeat("margin note ", 100_000) // 1.2 MB, over MaxPayloadBytes too
		_, err = b.client.Signal(ctx, res.ID, "annotated", note, nil)
		require.NoError(t, err)
		n, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, len(note), n, "the workflow received the payload itself")
		raw, err := b.client.RawHistory(ctx, res.ID)
		require.NoError(t, err)
		sigs := eventsOf[history.SignalReceivedData](raw)
		require.Len(t, sigs, 1)
		_, ok := history.ParseBlobEnvelope(sigs[0].Payload)
		require.True(t, ok, "signal_received keeps the reference")

		_, err = b.client.Signal(ctx, res.ID, "annotated", note, nil)
		require.ErrorIs(t, err, sdk.ErrTaskState, "a finished task gets no blob and no signal")
		_, err = b.client.Signal(ctx, res.ID, "x", json.RawMessage(`{"cairn_blob":{"store":"db","key":"k","size":1,"sha256":"00"}}`), nil)
		require.ErrorIs(t, err, sdk.ErrInvalid)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

type bigOrder struct {
	ID    string `json:"id"`
	Lines string `json:"lines"`
}

// The compensators of a task whose input is kept by reference are handed
// the input itself: compensation replays the workflow over the input read
// back, not over its reference. On both stores.
func TestCompensationReadsAnInputKeptByReference(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		refunded := make(chan string, 1)
		wf := sdk.NewWorkflow("order.charge", 1, func(ctx workflow.Context, in bigOrder) (string, error) {
			return workflow.Step(ctx, "charge", func(context.Context) (string, error) { return "charged " + in.ID, nil },
				&workflow.StepOpts{Compensate: workflow.Compensate(func(context.Context, string) error {
					refunded <- in.ID
					return nil
				})})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, bigOrder{ID: "o-42", Lines: strings.Repeat("line ", 20_000)}, nil)
		require.NoError(t, err)
		_, err = res.Result(ctx)
		require.NoError(t, err)
		raw, err := b.client.RawHistory(ctx, res.ID)
		require.NoError(t, err)
		_, byRef := history.ParseBlobEnvelope(raw[0].Data.(history.TaskScheduledData).Input)
		require.True(t, byRef)
		require.NoError(t, b.client.Compensate(ctx, res.ID, "customer returned it"))
		select {
		case id := <-refunded:
			require.Equal(t, "o-42", id, "the compensator saw the input, not a zero value")
		case <-time.After(30 * time.Second):
			t.Fatal("the compensator did not run")
		}
	})
}

// An input in place and the same input by reference are the same start
// for its idempotency key, whichever came first, and whatever the order
// of its keys: clients with other blob thresholds, or a start from before
// an upgrade, retry into the task they made. On both stores.
func TestAnInputInPlaceAndByReferenceAreTheSameStart(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		inPlace, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), BlobThreshold: -1})
		require.NoError(t, err)
		t.Cleanup(inPlace.Close)
		lines := strings.Repeat("l", 100_000)
		ab := json.RawMessage(`{"a":1,"lines":"` + lines + `"}`)
		ba := json.RawMessage(`{"lines":"` + lines + `", "a":1.0}`)
		ref := sdk.TypeRef{Name: "order.charge", Version: 1}
		for i, c := range []struct {
			first, second *sdk.Client
			input         json.RawMessage
		}{{inPlace, b.client, ab}, {b.client, inPlace, ab}, {b.client, b.client, ba}} {
			key := fmt.Sprintf("order-%d", i)
			first, err := c.first.StartDynamic(ctx, ref, ab, &sdk.StartOpts{IdempotencyKey: key})
			require.NoError(t, err, "case %d", i)
			again, err := c.second.StartDynamic(ctx, ref, c.input, &sdk.StartOpts{IdempotencyKey: key})
			require.NoError(t, err, "case %d: the same start", i)
			require.True(t, again.Existing, "case %d", i)
			require.Equal(t, first.ID, again.ID, "case %d", i)
			_, err = c.second.StartDynamic(ctx, ref, json.RawMessage(`{"a":2,"lines":"`+lines+`"}`), &sdk.StartOpts{IdempotencyKey: key})
			require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused, "case %d: another input", i)
		}
	})
}
