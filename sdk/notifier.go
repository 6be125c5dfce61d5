package sdk

import (
	"context"
	"log/slog"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
)

// Notifier is one listening connection that the waits of several clients
// share ([ClientConfig.Notifier]): a server with a client per namespace
// holds one, not one per client. It hears when tasks finish; waits poll as
// well, so a notification lost is only a wait that ends a little later.
type Notifier struct {
	n *engine.Notifier
}

// NewNotifier returns a notifier over st (a store of the clients' schema,
// or their cell's); it listens once started. logger nil: slog.Default().
func NewNotifier(st store.Store, logger *slog.Logger) *Notifier {
	return &Notifier{n: engine.NewNotifier(st, &engine.NotifierOpts{Logger: logger})}
}

// Start listens until Stop or until ctx is done, reconnecting after
// errors. A second Start while it listens is refused.
func (n *Notifier) Start(ctx context.Context) error { return n.n.Start(ctx) }

// Live reports whether notifications are arriving: the notifier is
// listening and the last probe it sent itself through the database came
// back in time (a listener through a pooler in transaction mode hears
// nothing).
func (n *Notifier) Live() bool { return n.n.Live() }

// Stop stops listening and waits. It is idempotent, and safe before
// Start.
func (n *Notifier) Stop() { n.n.Stop() }
