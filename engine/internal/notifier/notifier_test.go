package notifier_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

func TestNotifier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{})
	wake, unsubscribe := n.Subscribe()
	defer unsubscribe()
	require.NoError(t, n.Start(ctx))
	defer n.Stop()
	require.Error(t, n.Start(ctx), "a second Start is refused")

	// The notifier wakes its subscribers once it listens, since anything
	// may have become ready before.
	select {
	case <-wake:
	case <-time.After(enginetest.WaitTimeout):
		t.Fatal("no wake-up once listening")
	}

	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = s.WithTx(tx).TaskStart(ctx, (*enginetest.TaskOpts)(nil).Params())
	require.NoError(t, err)
	select {
	case <-wake:
		t.Fatal("woken before commit")
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case <-wake:
	case <-time.After(enginetest.WaitTimeout):
		t.Fatal("no wake-up after commit")
	}

	// A subscriber that unsubscribed is not woken; another one is.
	other, unsubscribeOther := n.Subscribe()
	unsubscribeOther()
	wake2, unsubscribe2 := n.Subscribe()
	defer unsubscribe2()
	enginetest.StartTask(t, s, nil)
	select {
	case <-wake2:
	case <-time.After(enginetest.WaitTimeout):
		t.Fatal("no wake-up for a second subscriber")
	}
	select {
	case <-other:
		t.Fatal("an unsubscribed channel was woken")
	default:
	}

	n.Stop()
	n.Stop() // idempotent
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
}

func TestNotifierReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{Logger: enginetest.Logger(t)})
	wake, unsubscribe := n.Subscribe()
	defer unsubscribe()
	require.NoError(t, n.Start(ctx))
	defer n.Stop()
	recv(t, wake, "a wake-up once listening")

	// Kill the listening connection from the server side.
	// Its last statement is the LISTEN on the schema's last channel.
	listen := `LISTEN "` + s.Schema() + `.%`
	var killed bool
	err := s.Pool().QueryRow(ctx, "SELECT coalesce(bool_and(pg_terminate_backend(pid)), false) FROM pg_stat_activity WHERE query LIKE $1", listen).Scan(&killed)
	require.NoError(t, err)
	require.True(t, killed, "found the notifier's connection")

	// It listens again, and says so, since notifications were lost
	// meanwhile; then it relays new ones.
	recv(t, wake, "a wake-up after reconnecting")
	enginetest.WaitFor(t, "the notifier to listen again", func() bool {
		var listening bool
		err := s.Pool().QueryRow(ctx, "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE $1", listen).Scan(&listening)
		require.NoError(t, err)
		return listening
	})
	enginetest.StartTask(t, s, nil)
	recv(t, wake, "a wake-up for a new task after reconnecting")
	n.Stop()
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
}

func TestNotifierStopBeforeStart(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{})
	n.Stop()
	n.Stop()
}

func TestNotifierAnnouncesFinishedTasksAndRequeues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	n := notifier.New(s, notifier.Opts{Logger: enginetest.Logger(t)})
	wake, unsubscribe := n.Subscribe()
	defer unsubscribe()
	doneID := enginetest.StartTask(t, s, nil)
	otherID := enginetest.StartTask(t, s, nil)
	finished, stopWaiting := n.WaitFor(doneID)
	defer stopWaiting()
	other, stopOther := n.WaitFor(otherID)
	defer stopOther()
	require.NoError(t, n.Start(ctx))
	defer n.Stop()
	recv(t, wake, "the wake-up on listening")
	recv(t, finished, "the wake-up on listening")
	recv(t, other, "the wake-up on listening")

	// A released task is due at once: workers hear of it.
	first := enginetest.ClaimOne(t, s, "w1", time.Minute)
	_, err := enginetest.AppendFenced(ctx, s, first, history.TaskReleasedData{WorkerID: "w1", LeaseEpoch: first.State.Lease.Epoch})
	require.NoError(t, err)
	recv(t, wake, "a wake-up for the released task")

	// Completing a task tells its waiters, and only them.
	for {
		ct := enginetest.ClaimOne(t, s, "w2", time.Minute)
		if ct.Task.ID == doneID {
			enginetest.Complete(t, s, ct)
			break
		}
		_, err := enginetest.AppendFenced(ctx, s, ct, history.TaskReleasedData{WorkerID: "w2", LeaseEpoch: ct.State.Lease.Epoch})
		require.NoError(t, err)
	}
	recv(t, finished, "the finish of the awaited task")
	select {
	case <-other:
		t.Fatal("a waiter for another task was woken")
	default:
	}
	enginetest.RequireProjectionsMatch(t, s)
}

// recv waits for a value from ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(enginetest.WaitTimeout):
		t.Fatalf("timed out after %s waiting for %s", enginetest.WaitTimeout, what)
		panic("unreachable")
	}
}
