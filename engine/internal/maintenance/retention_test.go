package maintenance_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/s3test"
)

// TestRescuerRemovesFinishedTasksPastRetention runs the leader's pass with
// retention: a namespace's own setting, and the default for a namespace
// without one; what has not finished stays, and so does a namespace with
// neither.
func TestRescuerRemovesFinishedTasksPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	finish := func(namespace string) uuid.UUID {
		t.Helper()
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{Namespace: namespace, IdempotencyKey: "k-" + namespace})
		p := enginetest.ClaimParams("w", 1, time.Minute)
		p.Namespace = namespace
		claimed := enginetest.Claim(t, s, p)
		require.Len(t, claimed, 1)
		enginetest.Complete(t, s, claimed[0])
		return id
	}
	own, byDefault := finish("own"), finish(store.DefaultNamespace)
	pending := enginetest.StartTask(t, s, &enginetest.TaskOpts{})
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "keyed", KeyRetention: time.Hour}))
	keyed := finish("keyed")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "own", Retention: 20 * time.Millisecond}))

	r, err := maintenance.New(maintenance.Config{
		Store: s, Owner: "leader", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t),
		Retention: maintenance.RetentionConfig{Default: 50 * time.Millisecond, Batch: 1},
	})
	require.NoError(t, err)
	// "keyed" sets only its key retention: the default retention applies.
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	for _, c := range []struct {
		namespace string
		id        uuid.UUID
	}{{"own", own}, {store.DefaultNamespace, byDefault}, {"keyed", keyed}} {
		enginetest.WaitFor(t, "task of "+c.namespace+" removed", func() bool {
			_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: c.id})
			return err != nil
		})
		_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: c.id})
		require.ErrorIs(t, err, store.ErrNotFound)
		evs, err := store.TaskEvents(ctx, s, "", c.id)
		require.NoError(t, err)
		require.Empty(t, evs, "its log went with it")
		again, err := s.TaskStart(ctx, (&enginetest.TaskOpts{Namespace: c.namespace, IdempotencyKey: "k-" + c.namespace}).Params())
		require.NoError(t, err)
		require.Equal(t, store.TaskStartResult{ID: c.id, Existing: true}, again, "its key stays taken (24h by default)")
	}
	r.Stop()
	require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, pending).Status, "a pending task is never removed")
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestRescuerRefusesNegativeRetention(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	for _, r := range []maintenance.RetentionConfig{{Default: -time.Hour}, {KeyDefault: -1}, {Budget: -time.Second}} {
		_, err := maintenance.New(maintenance.Config{Store: s, Owner: "o", Retention: r})
		require.Error(t, err, "%+v is refused: a negative default would remove every finished task", r)
	}
}

// TestRetentionWithoutDefaultKeepsNamespacesWithoutSettings: with no
// default, only a namespace's own retention removes anything.
func TestRetentionWithoutDefaultKeepsNamespacesWithoutSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	id := enginetest.StartTask(t, s, &enginetest.TaskOpts{})
	enginetest.Complete(t, s, enginetest.ClaimOne(t, s, "w", time.Minute))
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "leader", Interval: 10 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	// A nonzero default of any length would have removed the task within
	// these passes (ten and more); the lease, renewed under the rescuer's
	// own owner, shows it led them.
	time.Sleep(200 * time.Millisecond)
	led, err := s.LeaderAttempt(ctx, &store.LeaderAttemptParams{Name: "rescuer", Owner: "leader", TTL: time.Second})
	require.NoError(t, err)
	require.True(t, led, "the rescuer led the passes")
	r.Stop()
	require.Equal(t, history.StatusCompleted, enginetest.GetTask(t, s, id).Status, "no retention set, none applied")
}

// TestRescuerArchivesBeforeRemoving: with an archive, the leader writes the
// histories of the tasks it removes first (a namespace's own, on an
// S3-protocol server; the default, a directory), and they read back equal
// to what the database held, byte for byte as JSON. A namespace whose
// archive cannot be written keeps its tasks.
func TestRescuerArchivesBeforeRemoving(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cairn-test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cairn-test-secret")
	ctx := context.Background()
	s := enginetest.Store(t)
	s3 := s3test.Start(t, "archive", "cairn")
	dir := "file://" + filepath.ToSlash(t.TempDir())
	blocked := filepath.Join(t.TempDir(), "not-a-dir")
	require.NoError(t, os.WriteFile(blocked, nil, 0o600))

	finish := func(namespace string) (uuid.UUID, string) {
		t.Helper()
		id := enginetest.StartTask(t, s, &enginetest.TaskOpts{Namespace: namespace, Input: []byte(`{"doc":"café"}`)})
		p := enginetest.ClaimParams("w", 1, time.Minute)
		p.Namespace = namespace
		claimed := enginetest.Claim(t, s, p)
		require.Len(t, claimed, 1)
		enginetest.Complete(t, s, claimed[0])
		before, err := json.Marshal(enginetest.Events(t, s, id))
		require.NoError(t, err)
		return id, string(before)
	}
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "on-s3", Archive: s3}))
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "broken", Archive: "file://" + filepath.ToSlash(blocked)}))
	onS3, onS3JSON := finish("on-s3")
	inDir, inDirJSON := finish(store.DefaultNamespace)
	kept, _ := finish("broken")

	archives := &archive.Buckets{}
	r, err := maintenance.New(maintenance.Config{
		Store: s, Owner: "leader", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t),
		Retention: maintenance.RetentionConfig{Default: time.Millisecond, DefaultArchive: dir, Archives: archives},
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	for _, c := range []struct {
		namespace, location string
		id                  uuid.UUID
		before              string
	}{{"on-s3", s3, onS3, onS3JSON}, {store.DefaultNamespace, dir, inDir, inDirJSON}} {
		enginetest.WaitFor(t, "task of "+c.namespace+" removed", func() bool {
			_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: c.id})
			return err != nil
		})
		evs, err := archives.History(ctx, c.location, c.namespace, c.id)
		require.NoError(t, err)
		after, err := json.Marshal(evs)
		require.NoError(t, err)
		require.Equal(t, c.before, string(after), "the archived history of %s", c.namespace)
		_, err = archives.History(ctx, c.location, "elsewhere", c.id)
		require.ErrorIs(t, err, archive.ErrNotArchived)
	}
	r.Stop()
	task, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "broken", ID: kept})
	require.NoError(t, err, "a task whose archive cannot be written is not removed")
	require.Equal(t, history.StatusCompleted, task.Status)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))

	_, err = maintenance.New(maintenance.Config{Store: s, Owner: "o", Retention: maintenance.RetentionConfig{DefaultArchive: "relative/dir"}})
	require.ErrorContains(t, err, "use file:///absolute/dir or s3://bucket/prefix")
}

// TestLeadersShareTheDefaultArchive: a leader given a default archive
// records it in the database, and a leader started without one archives
// there too rather than remove without a copy.
func TestLeadersShareTheDefaultArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	dir := "file://" + filepath.ToSlash(t.TempDir())
	run := func(cfg maintenance.RetentionConfig, until func() bool) {
		t.Helper()
		r, err := maintenance.New(maintenance.Config{Store: s, Owner: "leader", Interval: 20 * time.Millisecond,
			Logger: enginetest.Logger(t), Retention: cfg})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		defer r.Stop()
		enginetest.WaitFor(t, "the pass", until)
	}
	// A leader with the default and nothing to remove yet (no retention).
	run(maintenance.RetentionConfig{DefaultArchive: dir}, func() bool {
		all, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
		require.NoError(t, err)
		return slices.ContainsFunc(all, func(ns store.NamespaceConfig) bool { return ns.Name == store.DefaultsRow && ns.Archive == dir })
	})
	id := enginetest.StartTask(t, s, nil)
	enginetest.Complete(t, s, enginetest.ClaimOne(t, s, "w", time.Minute))
	before, err := json.Marshal(enginetest.Events(t, s, id))
	require.NoError(t, err)
	// A leader without one removes, archiving to the recorded default.
	run(maintenance.RetentionConfig{Default: time.Millisecond}, func() bool {
		_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
		return err != nil
	})
	evs, err := (&archive.Buckets{}).History(ctx, dir, store.DefaultNamespace, id)
	require.NoError(t, err, "archived where the other leader was told")
	after, err := json.Marshal(evs)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after))
}

// A task type's own retention removes its tasks even where the namespace
// keeps its own (no retention, no default), and leaves the other types'.
func TestRescuerRemovesByATypesOwnRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	finish := func(typ string) uuid.UUID {
		t.Helper()
		opts := &enginetest.TaskOpts{Namespace: "typed", Type: typ}
		id := enginetest.StartTask(t, s, opts)
		p := enginetest.ClaimParams("w", 1, time.Minute)
		p.Namespace, p.Types = "typed", []store.TypeKey{opts.TypeKey()}
		claimed := enginetest.Claim(t, s, p)
		require.Len(t, claimed, 1)
		enginetest.Complete(t, s, claimed[0])
		return id
	}
	report, kept := finish("report"), finish("invoice")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "typed", TypeRetention: map[string]time.Duration{"report": 10 * time.Millisecond}}))
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "leader", Interval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	enginetest.WaitFor(t, "the report task removed", func() bool {
		_, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: "typed", ID: report})
		return err != nil
	})
	time.Sleep(100 * time.Millisecond) // a few more passes
	_, err = s.TaskGet(ctx, &store.TaskGetParams{Namespace: "typed", ID: kept})
	require.NoError(t, err, "the namespace's own tasks stay: it has no retention")
}
