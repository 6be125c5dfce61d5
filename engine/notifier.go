package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifier listens on the store's NOTIFY channel over one dedicated
// connection and wakes its subscribers when new work is ready. It only makes
// workers react sooner: notifications can be lost (a dropped connection, a
// database without LISTEN), so workers poll as well and stay correct without
// it.
type Notifier struct {
	store  *Store
	logger *slog.Logger
	svc    service

	mu   sync.Mutex
	subs map[chan struct{}]struct{} // written under mu by Subscribe and its cancel; read by the run loop
}

// NewNotifier returns a notifier for store; it listens once started.
func NewNotifier(store *Store, logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.Default()
	}
	return &Notifier{store: store, logger: logger, subs: map[chan struct{}]struct{}{}}
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

func (n *Notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Start listens until Stop or until ctx is done, reconnecting after errors.
func (n *Notifier) Start(ctx context.Context) error {
	return n.svc.start(ctx, func(ctx context.Context) {
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := n.listen(ctx)
			if ctx.Err() != nil {
				return
			}
			n.logger.Warn("notifier: listen connection lost; polling continues", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	})
}

func (n *Notifier) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, n.store.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.store.channel}.Sanitize()); err != nil {
		return err
	}
	// Anything may have become ready while not listening.
	n.broadcast()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		n.broadcast()
	}
}

// Stop stops listening and waits. It is idempotent.
func (n *Notifier) Stop() { n.svc.stop() }
