package sdk_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/s3test"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A namespace's retention, set through the client, is applied by the
// worker's rescuer: its finished tasks go, whole; a late start with a
// removed task's key names the removed task; settings are validated at
// the SDK's edge on both stores alike.
func TestNamespaceRetentionRemovesFinishedTasks(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, RescueInterval: 20 * time.Millisecond})
		wf := sdk.NewWorkflow("report.build", 1, func(ctx workflow.Context, n int) (int, error) { return n, nil }, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.Error(t, b.client.SetNamespace(ctx, "bad name", sdk.NamespaceSettings{Retention: time.Hour}))
		require.Error(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: -time.Hour}))
		// An hour first: a loaded machine may read the result later than a
		// short retention keeps the task.
		require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: time.Hour, KeyRetention: time.Hour}))

		res, err := sdk.Start(ctx, b.client, wf, 7, &sdk.StartOpts{IdempotencyKey: "report-7"})
		require.NoError(t, err)
		startWorker(t, b.worker)
		out, err := res.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, out)
		_, err = b.client.Get(ctx, res.ID)
		require.NoError(t, err, "an hour's retention keeps the finished task")
		got, err := b.client.Namespaces(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.False(t, got[0].OldestFinished.IsZero(), "the finished task is the oldest")

		// The short retention may remove the task before the settings are
		// read back: they are compared without the oldest finished task.
		require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: 100 * time.Millisecond, KeyRetention: time.Hour}))
		got, err = b.client.Namespaces(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		got[0].OldestFinished = time.Time{}
		require.Equal(t, []store.NamespaceConfig{{Name: "default", Retention: 100 * time.Millisecond, KeyRetention: time.Hour}}, got)
		require.Eventually(t, func() bool {
			_, err := b.client.Get(ctx, res.ID)
			return err != nil
		}, 10*time.Second, 20*time.Millisecond, "the finished task is removed after its retention")
		_, err = b.client.Get(ctx, res.ID)
		require.ErrorIs(t, err, sdk.ErrNotFound)
		again, err := sdk.Start(ctx, b.client, wf, 7, &sdk.StartOpts{IdempotencyKey: "report-7"})
		require.NoError(t, err)
		require.Equal(t, res.ID, again.ID, "the key stays taken: the late duplicate names the removed task")
		require.True(t, again.Existing)
		stopWorker(t, b.worker)
	})
}

// Tasks retention removed are read back from the archive the leader wrote
// first, equal to the history before the removal: through the client's
// default (a directory), then, once the namespace has an archive of its
// own (an S3-protocol server), through that, the earlier tasks still
// found in the default; AuditArchive runs a filter over both. On both
// stores.
func TestRemovedTasksAreReadFromTheArchive(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		dir := "file://" + filepath.ToSlash(t.TempDir())
		s3 := s3test.Start(t, "archive", "histories")
		b := setup(t, sdk.WorkerConfig{Concurrency: 4, RescueInterval: 20 * time.Millisecond, DefaultArchive: dir})
		wf := sdk.NewWorkflow("report.build", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "double", func(context.Context) (int, error) { return 2 * n, nil }, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		ctx := context.Background()
		require.ErrorIs(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Archive: "s3://"}), sdk.ErrInvalid)
		reader, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), DefaultArchive: dir})
		require.NoError(t, err)
		t.Cleanup(reader.Close)
		startWorker(t, b.worker)

		var ids []uuid.UUID
		var befores []string
		for i, archive := range []string{"", s3} {
			require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Archive: archive}))
			res, err := sdk.Start(ctx, b.client, wf, i+1, nil)
			require.NoError(t, err)
			_, err = res.Result(ctx)
			require.NoError(t, err)
			evs, err := b.client.History(ctx, res.ID)
			require.NoError(t, err)
			before, err := json.Marshal(evs)
			require.NoError(t, err)
			require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: time.Millisecond, Archive: archive}))
			require.Eventually(t, func() bool {
				_, err := b.client.Get(ctx, res.ID)
				return err != nil
			}, 10*time.Second, 20*time.Millisecond, "the finished task is removed")
			ids, befores = append(ids, res.ID), append(befores, string(before))
		}
		for i, id := range ids {
			evs, err := reader.History(ctx, id)
			require.NoError(t, err, "task %d is read from the archive", i)
			after, err := json.Marshal(evs)
			require.NoError(t, err)
			require.Equal(t, befores[i], string(after))
		}
		_, err = b.client.History(ctx, ids[1])
		require.NoError(t, err, "the namespace's own archive needs no default")
		_, err = b.client.History(ctx, ids[0])
		require.NoError(t, err, "a client without a default reads the one the leader recorded")

		filter, err := sdk.CompileEventFilter(`event.type == "step_completed"`)
		require.NoError(t, err)
		var audited []uuid.UUID
		require.NoError(t, reader.AuditArchive(ctx, sdk.AuditParams{Filter: filter}, func(r sdk.AuditRecord) error {
			require.Equal(t, "completed", string(r.Task.Status))
			audited = append(audited, r.Task.ID)
			return nil
		}))
		require.ElementsMatch(t, ids, audited, "one step of each archived task")
		_, err = reader.History(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, sdk.ErrNotFound, "a task in neither the database nor an archive is not found")

		// The archived histories replay on the same code, not on code
		// that renamed the step.
		same := sdk.NewReplayer()
		require.NoError(t, sdk.RegisterReplay(same, wf))
		replayed, err := same.ReplayArchive(ctx, reader, nil)
		require.NoError(t, err)
		require.Equal(t, 2, replayed.Replayed)
		require.NoError(t, replayed.Err())
		renamed := sdk.NewReplayer()
		require.NoError(t, sdk.RegisterReplay(renamed, sdk.NewWorkflow("report.build", 1, func(ctx workflow.Context, n int) (int, error) {
			return workflow.Step(ctx, "triple", func(context.Context) (int, error) { return 3 * n, nil }, nil)
		}, nil)))
		replayed, err = renamed.ReplayArchive(ctx, reader, &sdk.ReplayArchiveOpts{Type: "report.build", Limit: 1})
		require.NoError(t, err)
		require.Equal(t, 1, replayed.Replayed)
		require.Len(t, replayed.Divergences, 1)
		require.Equal(t, "double", replayed.Divergences[0].Recorded)
		stopWorker(t, b.worker)
	})
}

// Blobs are archived with their tasks' histories: after the removal, a
// step's blob and a step output kept by reference read back from the
// archive, checked against their references. On both stores.
func TestArchivedBlobsReadBack(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		dir := "file://" + filepath.ToSlash(t.TempDir())
		b := setup(t, sdk.WorkerConfig{Concurrency: 2, RescueInterval: 20 * time.Millisecond, DefaultArchive: dir, BlobThreshold: 100})
		wf := sdk.NewWorkflow("doc.keep", 1, func(ctx workflow.Context, n int) (sdk.Blob, error) {
			if _, err := workflow.Step(ctx, "long", func(context.Context) (string, error) { return strings.Repeat("x", 500), nil }, nil); err != nil {
				return sdk.Blob{}, err
			}
			return workflow.Step(ctx, "put", func(ctx context.Context) (sdk.Blob, error) {
				return activities.PutBlob(ctx, "text/plain", []byte(strings.Repeat("page ", n)))
			}, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, 1000, nil)
		require.NoError(t, err)
		ref, err := res.Result(ctx)
		require.NoError(t, err)
		require.NoError(t, b.client.SetNamespace(ctx, "default", sdk.NamespaceSettings{Retention: time.Millisecond}))
		require.Eventually(t, func() bool {
			_, err := b.client.Get(ctx, res.ID)
			return err != nil
		}, 10*time.Second, 20*time.Millisecond, "the finished task is removed")

		reader, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), DefaultArchive: dir})
		require.NoError(t, err)
		t.Cleanup(reader.Close)
		data, err := reader.GetBlob(ctx, ref)
		require.NoError(t, err, "the blob is read from the archive")
		require.Equal(t, strings.Repeat("page ", 1000), string(data))
		events, err := reader.History(ctx, res.ID)
		require.NoError(t, err)
		steps := eventsOf[history.StepCompletedData](events)
		require.Equal(t, `"`+strings.Repeat("x", 500)+`"`, string(steps[0].Output), "the output kept by reference, read from the archive")
		require.Nil(t, steps[0].OutputRef)
		bad := ref
		bad.SHA256 = strings.Repeat("0", 64)
		_, err = reader.GetBlob(ctx, bad)
		require.ErrorIs(t, err, sdk.ErrBlobCorrupt, "an archived blob is checked too")
	})
}
