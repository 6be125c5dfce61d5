package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// MoveNamespace between two schemas (two cells): a running attempt holds
// the move past its drain timeout, which undoes the fence; once it ends,
// the namespace's rows move whole (the other namespace stays) and the
// source refuses its new tasks naming the destination; an interrupted
// move (the copy committed, a source row left) is finished by running it
// again; a move back drops the fence; a destination holding rows of the
// namespace is refused.
func TestMoveNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := enginetest.Store(t), enginetest.Store(t)
	acme := &enginetest.TaskOpts{Namespace: "acme"}
	ids := enginetest.StartTasks(t, src, 20, acme)
	enginetest.StartTasks(t, src, 5, nil) // default's stay
	require.NoError(t, src.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "acme", Retention: time.Hour}))

	claim := enginetest.ClaimParams("w", 1, time.Minute)
	claim.Namespace = "acme"
	running := enginetest.Claim(t, src, claim)
	require.Len(t, running, 1)
	_, err := pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us", DrainTimeout: 300 * time.Millisecond})
	require.ErrorContains(t, err, "1 of its tasks still running after 300ms: the move is undone")
	// Undone: acme starts in the source again.
	ids = append(ids, enginetest.StartTask(t, src, acme))
	enginetest.Complete(t, src, running[0])

	report, err := pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.NoError(t, err)
	require.EqualValues(t, 21, report.Rows["tasks"])
	require.EqualValues(t, 1, report.Rows["namespaces"])
	require.Positive(t, report.Paused)
	for _, id := range ids {
		_, err := src.TaskGet(ctx, &store.TaskGetParams{Namespace: "acme", ID: id})
		require.ErrorIs(t, err, store.ErrNotFound)
		task, err := dst.TaskGet(ctx, &store.TaskGetParams{Namespace: "acme", ID: id})
		require.NoError(t, err)
		require.NotEmpty(t, enginetest.Events(t, dst, id))
		if id == running[0].Task.ID {
			require.Equal(t, history.StatusCompleted, task.Status)
		}
	}
	require.Equal(t, 5, enginetest.CountRows(t, src, "tasks"), "the default namespace stays")
	require.Equal(t, 21, enginetest.RequireProjectionsMatch(t, dst))
	got, err := dst.NamespaceList(ctx, &store.NamespaceListParams{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "acme", got[0].Name)
	require.Equal(t, time.Hour, got[0].Retention, "the settings moved")

	// The source refuses acme's starts, naming where it went.
	_, err = src.TaskStart(ctx, acme.Params())
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "namespace acme has moved to cell us")
	enginetest.StartTask(t, src, nil) // others start

	// A second move finds the fence and the rows in the destination: it
	// finishes what an interrupted move left, here nothing.
	report, err = pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.NoError(t, err)
	require.True(t, report.Resumed)

	// A task put in the source past the fence, never copied: finishing
	// the move would lose it, so it is refused.
	tasks := enginetest.TableName(src, "tasks")
	_, err = src.Pool().Exec(ctx, "ALTER TABLE "+tasks+" DISABLE TRIGGER USER")
	require.NoError(t, err)
	stray := enginetest.StartTask(t, src, acme)
	_, err = pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.ErrorContains(t, err, "1 of the source's 1 tasks are missing there or behind")
	_, err = src.TaskGet(ctx, &store.TaskGetParams{Namespace: "acme", ID: stray})
	require.NoError(t, err, "nothing removed")
	// Removed again by hand, the events through retention's door.
	conn, err := src.Pool().Acquire(ctx)
	require.NoError(t, err)
	for _, stmt := range []string{"SELECT set_config('cairn.retention', 'on', false)",
		"DELETE FROM " + enginetest.TableName(src, "events") + " WHERE task_id = $1", "DELETE FROM " + tasks + " WHERE id = $1"} {
		if strings.Contains(stmt, "$1") {
			_, err = conn.Exec(ctx, stmt, stray)
		} else {
			_, err = conn.Exec(ctx, stmt)
		}
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, "RESET cairn.retention")
	require.NoError(t, err)
	conn.Release()

	// An interrupted move: the copy committed, the source's rows left
	// (put back here from the destination). Running it again removes
	// them.
	_, err = src.Pool().Exec(ctx, "INSERT INTO "+tasks+" SELECT * FROM "+enginetest.TableName(dst, "tasks")+" WHERE namespace = 'acme'")
	require.NoError(t, err)
	_, err = src.Pool().Exec(ctx, "INSERT INTO "+enginetest.TableName(src, "events")+" SELECT e.* FROM "+enginetest.TableName(dst, "events")+
		" AS e JOIN "+enginetest.TableName(dst, "tasks")+" AS t ON t.id = e.task_id WHERE t.namespace = 'acme'")
	require.NoError(t, err)
	_, err = src.Pool().Exec(ctx, "ALTER TABLE "+tasks+" ENABLE TRIGGER USER")
	require.NoError(t, err)
	report, err = pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.NoError(t, err)
	require.True(t, report.Resumed)
	for _, id := range ids {
		_, err := src.TaskGet(ctx, &store.TaskGetParams{Namespace: "acme", ID: id})
		require.ErrorIs(t, err, store.ErrNotFound, "the interrupted move's rows are removed from the source")
	}

	// Back to the source: its fence is dropped, acme starts there again,
	// and the destination refuses it in turn.
	_, err = pgstore.MoveNamespace(ctx, dst, src, pgstore.MoveParams{Namespace: "acme", ToCell: "eu"})
	require.NoError(t, err)
	enginetest.StartTask(t, src, acme)
	_, err = dst.TaskStart(ctx, acme.Params())
	require.ErrorContains(t, err, "namespace acme has moved to cell eu")

	// A destination that holds the namespace (not a move's) is refused.
	enginetest.StartTask(t, dst, &enginetest.TaskOpts{Namespace: "initech"})
	enginetest.StartTask(t, src, &enginetest.TaskOpts{Namespace: "initech"})
	_, err = pgstore.MoveNamespace(ctx, src, dst, pgstore.MoveParams{Namespace: "initech", ToCell: "us"})
	require.ErrorContains(t, err, "the destination already holds rows of it")

	_, err = pgstore.MoveNamespace(ctx, src, src, pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.ErrorContains(t, err, "the same store")
}
