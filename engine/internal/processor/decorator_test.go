package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// countingStore decorates a store, as a tracing or fault-injecting wrapper
// would: it forwards everything and counts the notifications its
// listeners pass on.
type countingStore struct {
	store.Store
	listeners     atomic.Int32
	notifications atomic.Int32
}

func (s *countingStore) NewListener() store.Listener {
	s.listeners.Add(1)
	return &countingListener{Listener: s.Store.NewListener(), notifications: &s.notifications}
}

type countingListener struct {
	store.Listener
	notifications *atomic.Int32
}

func (l *countingListener) WaitForNotification(ctx context.Context) (store.Notification, error) {
	n, err := l.Listener.WaitForNotification(ctx)
	if err == nil && n.Ready {
		l.notifications.Add(1)
	}
	return n, err
}

// A worker over a decorated PostgreSQL store is still woken by NOTIFY: the
// notifier reaches the driver's LISTEN only through the Listener the
// decorator hands out, and with polling once an hour nothing else brings
// the second task in.
func TestDecoratedStoreStillWakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := enginetest.Store(t)
	s := &countingStore{Store: pg}
	n := notifier.New(s, notifier.Opts{Logger: enginetest.Logger(t)})
	require.NoError(t, n.Start(ctx))
	t.Cleanup(n.Stop)
	p, err := processor.New(processor.Config{Store: s, Notifier: n, Handler: completeHandler(),
		Types: []store.TypeKey{enginetest.TestKey}, PollInterval: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	probe := enginetest.StartTask(t, pg, nil)
	require.NoError(t, p.Start(ctx))
	enginetest.WaitStatus(t, pg, probe, history.StatusCompleted) // the first claim, at start
	require.Eventually(t, n.Listening, enginetest.WaitTimeout, enginetest.PollInterval, "the notifier listens through the decorator")

	id := enginetest.StartTask(t, pg, nil)
	enginetest.WaitStatus(t, pg, id, history.StatusCompleted)
	stopProcessor(t, p)
	n.Stop()
	require.EqualValues(t, 1, s.listeners.Load(), "the notifier asked the decorator for its listener")
	require.Positive(t, s.notifications.Load(), "the wake-up came through the decorator's listener")
	require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, pg))
}
