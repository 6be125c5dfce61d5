package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/google/uuid"
)

// Notifier relays the notifications of the store's [store.Listener] (PostgreSQL:
// LISTEN on a connection of its own; SQLite: in-process announcements): it
// wakes its subscribers when new work is ready, waiters when the task they
// wait for finishes, and cancel listeners when a running task's cancel is
// requested. It only makes
// workers react sooner: notifications can be lost (a dropped connection, a
// database without LISTEN), so workers poll as well and stay correct without
// it.
type Notifier struct {
	store  store.Store
	logger *slog.Logger
	svc    service

	listening atomic.Bool // true while the listener is connected

	mu      sync.Mutex
	subs    map[chan struct{}]struct{}               // ready subscribers; written under mu by Subscribe and its cancel; read by the run loop
	cancels map[*func(uuid.UUID)]struct{}            // cancel-request listeners; same discipline
	waiters map[uuid.UUID]map[chan struct{}]struct{} // per-task finish waiters; same discipline
}

// NewNotifier returns a notifier for s; it listens once started.
func NewNotifier(s store.Store, logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.Default()
	}
	return &Notifier{store: s, logger: logger, subs: map[chan struct{}]struct{}{},
		waiters: map[uuid.UUID]map[chan struct{}]struct{}{}, cancels: map[*func(uuid.UUID)]struct{}{}}
}

// Subscribe returns a channel that receives a value after work becomes
// ready, and a function to unsubscribe. Wake-ups coalesce: the channel has
// room for one, so a slow subscriber misses none that matters.
func (n *Notifier) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.subs, ch)
		n.mu.Unlock()
	}
}

// OnCancel calls fn with the id of every running task whose cancel is
// requested, as announced, until the returned function is called. fn runs on
// the notifier's goroutine and must return quickly.
func (n *Notifier) OnCancel(fn func(id uuid.UUID)) (stop func()) {
	key := &fn
	n.mu.Lock()
	n.cancels[key] = struct{}{}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		delete(n.cancels, key)
		n.mu.Unlock()
	}
}

func (n *Notifier) cancelled(ids []uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		for fn := range n.cancels {
			(*fn)(id)
		}
	}
}

// Listening reports whether the notifier's connection is listening now, so
// notifications are being relayed.
func (n *Notifier) Listening() bool { return n.listening.Load() }

// WaitFor returns a channel that receives a value when task id may have
// finished (it is announced on the done channel, or the listener
// reconnected and may have missed it), and a function to stop waiting. The
// receiver re-reads the task to know.
func (n *Notifier) WaitFor(id uuid.UUID) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.waiters[id] == nil {
		n.waiters[id] = map[chan struct{}]struct{}{}
	}
	n.waiters[id][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.waiters[id], ch)
		if len(n.waiters[id]) == 0 {
			delete(n.waiters, id)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) finished(ids []uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.waiters) == 0 {
		return
	}
	for _, id := range ids {
		for ch := range n.waiters[id] {
			wake(ch)
		}
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (n *Notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		wake(ch)
	}
	for _, chans := range n.waiters {
		for ch := range chans {
			wake(ch)
		}
	}
}

func (n *Notifier) wakeSubscribers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		wake(ch)
	}
}

func (n *Notifier) relay(note store.Notification) {
	if len(note.Done) > 0 {
		n.finished(note.Done)
	}
	if len(note.Cancel) > 0 {
		n.cancelled(note.Cancel)
	}
	if note.Ready {
		n.wakeSubscribers()
	}
}

// Start listens until Stop or until ctx is done, reconnecting after errors.
func (n *Notifier) Start(ctx context.Context) error {
	return n.svc.start(ctx, func(ctx context.Context) {
		l := n.store.NewListener()
		defer func() { _ = l.Close(context.WithoutCancel(ctx)) }()
		backoff := minBackoff
		down := newOutage(n.logger, "notifier (polling continues)")
		for ctx.Err() == nil {
			err := n.listen(ctx, l, func() { backoff = minBackoff; down.ok() })
			if ctx.Err() != nil {
				return
			}
			down.failed(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = nextBackoff(backoff, maxBackoff)
		}
	})
}

// listen connects l and relays its notifications until it fails; up is
// called once it is listening.
func (n *Notifier) listen(ctx context.Context, l store.Listener, up func()) error {
	if err := l.Connect(ctx); err != nil {
		return err
	}
	defer func() { _ = l.Close(context.WithoutCancel(ctx)) }()
	n.listening.Store(true)
	defer n.listening.Store(false)
	up()
	// Anything may have become ready, or finished, while not listening.
	n.broadcast()
	for {
		note, err := l.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.relay(note)
	}
}

// Stop stops listening and waits. It is idempotent.
func (n *Notifier) Stop() { n.svc.stop() }
