package sqlitestore

import (
	"context"
	"slices"
	"sync"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
)

// listener is the store's [store.Listener]: a subscription to its
// in-process announcements. Announcements arrive on the committing
// goroutine and are merged into one pending notification, so a commit never
// waits for the listener's reader.
type listener struct {
	s *Store

	mu      sync.Mutex
	stop    func()             // nil while not connected
	pending store.Notification // merged announcements not yet read
	signal  chan struct{}      // capacity 1: something is pending
}

// NewListener returns a listener on the store's announcements, not yet
// connected.
func (s *Store) NewListener() store.Listener {
	return &listener{s: s, signal: make(chan struct{}, 1)}
}

func (l *listener) Connect(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		return errors.AssertionFailedf("sqlitestore: listener connected twice")
	}
	l.pending = store.Notification{}
	l.stop = l.s.subscribe(l.add)
	return nil
}

// add merges an announcement into the pending notification.
func (l *listener) add(n store.Notification) {
	l.mu.Lock()
	l.pending.Ready = l.pending.Ready || n.Ready
	l.pending.Done = append(l.pending.Done, n.Done...)
	l.pending.Cancel = append(l.pending.Cancel, n.Cancel...)
	l.pending.Probes = append(l.pending.Probes, n.Probes...)
	l.pending.Streams = append(l.pending.Streams, n.Streams...)
	l.pending.Inquiries = l.pending.Inquiries || n.Inquiries
	l.pending.Answered = append(l.pending.Answered, n.Answered...)
	l.pending.Models = append(l.pending.Models, n.Models...)
	for _, q := range n.Remote {
		if !slices.Contains(l.pending.Remote, q) {
			l.pending.Remote = append(l.pending.Remote, q)
		}
	}
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (l *listener) WaitForNotification(ctx context.Context) (store.Notification, error) {
	for {
		l.mu.Lock()
		connected := l.stop != nil
		n := l.pending
		l.pending = store.Notification{}
		l.mu.Unlock()
		if !connected {
			return store.Notification{}, errors.New("sqlitestore: listener not connected")
		}
		if n.Ready || len(n.Done) > 0 || len(n.Cancel) > 0 || len(n.Probes) > 0 || len(n.Streams) > 0 || n.Inquiries || len(n.Answered) > 0 || len(n.Models) > 0 || len(n.Remote) > 0 {
			n.Done, n.Cancel, n.Probes, n.Streams, n.Answered = slices.Clip(n.Done), slices.Clip(n.Cancel), slices.Clip(n.Probes), slices.Clip(n.Streams), slices.Clip(n.Answered)
			n.Models, n.Remote = slices.Clip(n.Models), slices.Clip(n.Remote)
			return n, nil
		}
		select {
		case <-ctx.Done():
			return store.Notification{}, ctx.Err()
		case <-l.signal:
		}
	}
}

func (l *listener) Close(context.Context) error {
	l.mu.Lock()
	stop := l.stop
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	select { // a reader waiting learns it is closed
	case l.signal <- struct{}{}:
	default:
	}
	return nil
}

// Probe announces token to this listener alone: announcements are in
// process, so it comes back unless the listener is closed.
func (l *listener) Probe(_ context.Context, token string) error {
	l.mu.Lock()
	connected := l.stop != nil
	l.mu.Unlock()
	if !connected {
		return errors.New("sqlitestore: listener not connected")
	}
	l.add(store.Notification{Probes: []string{token}})
	return nil
}
