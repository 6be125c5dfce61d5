package engine

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Notifier listens on the store's NOTIFY channels over one dedicated
// connection (a [PGStore]), or to the store's in-process announcements (an
// [Announcer], the embedded store): it wakes its subscribers when new work
// is ready, and waiters when the task they wait for finishes. It only makes
// workers react sooner: notifications can be lost (a dropped connection, a
// database without LISTEN), so workers poll as well and stay correct without
// it.
type Notifier struct {
	store  Store
	logger *slog.Logger
	svc    service

	listening atomic.Bool // true while the LISTEN connection is up
	onListen  func()      // called each time LISTEN is up again; used by the run loop's goroutine only

	mu      sync.Mutex
	subs    map[chan struct{}]struct{}               // ready subscribers; written under mu by Subscribe and its cancel; read by the run loop
	cancels map[*func(uuid.UUID)]struct{}            // cancel-request listeners; same discipline
	waiters map[uuid.UUID]map[chan struct{}]struct{} // per-task finish waiters; same discipline
}

// NewNotifier returns a notifier for store; it listens once started.
func NewNotifier(store Store, logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.Default()
	}
	return &Notifier{store: store, logger: logger, subs: map[chan struct{}]struct{}{},
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

// parseIDs reads a NOTIFY payload of comma-separated task ids, skipping
// what is not one.
func parseIDs(payload string) []uuid.UUID {
	var ids []uuid.UUID
	for _, s := range strings.Split(payload, ",") {
		if id, err := uuid.Parse(s); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func (n *Notifier) wakeSubscribers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		wake(ch)
	}
}

// Announcement is what a store announces after a commit: work became ready,
// tasks finished, cancels of running tasks were requested.
type Announcement struct {
	Ready  bool
	Done   []uuid.UUID
	Cancel []uuid.UUID
}

// Announcer is a store that announces its commits in process, in place of
// PostgreSQL's NOTIFY: the notifier subscribes to it. fn is called after
// each commit that announces something, on the committing goroutine, and
// must return quickly.
type Announcer interface {
	Announce(fn func(Announcement)) (stop func())
}

func (n *Notifier) relay(a Announcement) {
	if len(a.Done) > 0 {
		n.finished(a.Done)
	}
	if len(a.Cancel) > 0 {
		n.cancelled(a.Cancel)
	}
	if a.Ready {
		n.wakeSubscribers()
	}
}

// Start listens until Stop or until ctx is done, reconnecting after errors.
func (n *Notifier) Start(ctx context.Context) error {
	pg, isPG := n.store.(*PGStore)
	if a, ok := n.store.(Announcer); ok && !isPG {
		return n.svc.start(ctx, func(ctx context.Context) {
			stop := a.Announce(n.relay)
			n.listening.Store(true)
			n.broadcast()
			<-ctx.Done()
			stop()
			n.listening.Store(false)
		})
	}
	if !isPG {
		return errors.Newf("engine: a notifier needs a *PGStore or an Announcer, not %T", n.store)
	}
	return n.svc.start(ctx, func(ctx context.Context) {
		backoff := minBackoff
		down := newOutage(n.logger, "notifier (polling continues)")
		n.onListen = down.ok
		for ctx.Err() == nil {
			err := n.listen(ctx, pg, &backoff)
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

// listen listens until the connection fails; once listening, it resets
// the caller's reconnect backoff.
func (n *Notifier) listen(ctx context.Context, store *PGStore, backoff *time.Duration) error {
	conn, err := pgx.ConnectConfig(ctx, store.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	for _, channel := range []string{store.channel, store.doneChannel, store.cancelChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return err
		}
	}
	*backoff = minBackoff
	n.listening.Store(true)
	if n.onListen != nil {
		n.onListen()
	}
	defer n.listening.Store(false)
	// Anything may have become ready, or finished, while not listening.
	n.broadcast()
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch note.Channel {
		case store.doneChannel:
			n.finished(parseIDs(note.Payload))
			continue
		case store.cancelChannel:
			n.cancelled(parseIDs(note.Payload))
			continue
		}
		n.wakeSubscribers()
	}
}

// Stop stops listening and waits. It is idempotent.
func (n *Notifier) Stop() { n.svc.stop() }
