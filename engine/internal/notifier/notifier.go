// Package notifier relays the store's notifications to the runtime: it
// wakes workers when work is ready, waiters when a task finishes,
// running attempts when their task's cancel is requested, stream
// readers when a task's streams have new entries, workers and
// askers when inquiries are made and answered, and steps waiting under
// a model rate limit when it may be their turn. Notifications
// only make things happen sooner; polling keeps everything correct
// without them.
//
// It imports engine/store, engine/internal/metrics and
// engine/internal/service.
package notifier

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/internal/service"
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
	opts   Opts
	svc    service.Base

	listening atomic.Bool // true while the listener is connected
	// deaf: the last probe did not come back in time, so notifications
	// are not arriving though the listener is connected (LISTEN through a
	// pooler in transaction mode); workers poll at FallbackPollInterval.
	deaf      atomic.Bool
	probeSeen atomic.Uint64 // the newest probe token that came back
	probeNext atomic.Uint64 // the last probe token sent: tokens grow across reconnects, so an old one never answers a new probe

	mu      sync.Mutex
	subs    map[chan struct{}]struct{}                    // ready subscribers; written under mu by Subscribe and its cancel; read by the run loop
	cancels map[*func(uuid.UUID)]struct{}                 // cancel-request listeners; same discipline
	waiters map[uuid.UUID]map[chan struct{}]struct{}      // per-task finish waiters, and per-inquiry answer waiters; same discipline
	streams map[uuid.UUID]map[chan struct{}]struct{}      // per-task stream readers; same discipline
	asked   map[chan struct{}]struct{}                    // inquiry subscribers (SubscribeInquiries); same discipline
	models  map[store.ModelKey]map[chan struct{}]struct{} // per-model-limit waiters (WaitModel); same discipline
	remote  map[string]map[chan struct{}]struct{}         // per-queue remote step claimers (WaitRemote); same discipline
}

// Opts configure [New].
type Opts struct {
	// Logger receives the notifier's warnings. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts lost probes and notifiers polling in their place. Nil:
	// none.
	Metrics *metrics.Metrics
	// ProbeInterval is how often the notifier checks that notifications
	// arrive: it sends one to itself through the store, as writers send
	// theirs. Default 10s.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe may take to come back before
	// notifications count as lost and workers poll every
	// [FallbackPollInterval] instead. Default 2s.
	ProbeTimeout time.Duration
}

// FallbackPollInterval is how often a worker polls while its notifier
// knows notifications are not arriving (not connected, or its probes lost),
// when its own poll interval is longer.
const FallbackPollInterval = 100 * time.Millisecond

// New returns a notifier for s; it listens once started.
func New(s store.Store, opts Opts) *Notifier {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 10 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 2 * time.Second
	}
	return &Notifier{store: s, logger: opts.Logger, opts: opts, subs: map[chan struct{}]struct{}{},
		waiters: map[uuid.UUID]map[chan struct{}]struct{}{}, cancels: map[*func(uuid.UUID)]struct{}{}, asked: map[chan struct{}]struct{}{},
		streams: map[uuid.UUID]map[chan struct{}]struct{}{}, models: map[store.ModelKey]map[chan struct{}]struct{}{},
		remote: map[string]map[chan struct{}]struct{}{}}
}

// WaitModel returns a channel that receives a value when steps waiting
// under the model limit k may go (store.Notification.Models: a step
// admitted or settled below its reservation, a ticket dropped, the
// limit changed), or the listener reconnected and may have missed it,
// and a function to stop waiting. The receiver asks again to know.
func (n *Notifier) WaitModel(k store.ModelKey) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.models[k] == nil {
		n.models[k] = map[chan struct{}]struct{}{}
	}
	n.models[k][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.models[k], ch)
		if len(n.models[k]) == 0 {
			delete(n.models, k)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) modelsFreed(keys []store.ModelKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range keys {
		for ch := range n.models[k] {
			wake(ch)
		}
	}
}

// WaitRemote returns a channel that receives a value when remote steps
// become claimable in the queue named by key (store.RemoteQueueKey: a
// dispatch, a release), or the listener reconnected and may have missed
// it, and a function to stop waiting. The receiver claims again to know.
func (n *Notifier) WaitRemote(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.remote[key] == nil {
		n.remote[key] = map[chan struct{}]struct{}{}
	}
	n.remote[key][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.remote[key], ch)
		if len(n.remote[key]) == 0 {
			delete(n.remote, key)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) remoteReady(keys []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range keys {
		for ch := range n.remote[k] {
			wake(ch)
		}
	}
}

// SubscribeInquiries returns a channel that receives a value after
// pending inquiries were made (store.Notification.Inquiries), or the
// listener reconnected and may have missed some, and a function to
// unsubscribe. Wake-ups coalesce, as [Notifier.Subscribe]'s.
func (n *Notifier) SubscribeInquiries() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	n.asked[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.asked, ch)
		n.mu.Unlock()
	}
}

func (n *Notifier) inquired() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.asked {
		wake(ch)
	}
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

// Live reports whether notifications are arriving: the listener is
// connected and its last probe came back in time. While it is not, workers
// poll every [FallbackPollInterval].
func (n *Notifier) Live() bool { return n.listening.Load() && !n.deaf.Load() }

// WaitFor returns a channel that receives a value when task id may have
// finished (it is announced on the done channel, or the listener
// reconnected and may have missed it), and a function to stop waiting. The
// receiver re-reads the task to know. An inquiry's id waits for its answer
// alike (store.Notification.Answered).
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

// WaitStream returns a channel that receives a value when task id's
// streams may have new entries or the task may have finished (either is
// announced, or the listener reconnected and may have missed it), and a
// function to stop waiting: what a stream's reader waits on between
// reads. The receiver reads the stream to know.
func (n *Notifier) WaitStream(id uuid.UUID) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.streams[id] == nil {
		n.streams[id] = map[chan struct{}]struct{}{}
	}
	n.streams[id][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.streams[id], ch)
		if len(n.streams[id]) == 0 {
			delete(n.streams, id)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) finished(ids []uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		for ch := range n.waiters[id] {
			wake(ch)
		}
		for ch := range n.streams[id] {
			wake(ch)
		}
	}
}

func (n *Notifier) streamed(ids []uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		for ch := range n.streams[id] {
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
	for _, chans := range n.streams {
		for ch := range chans {
			wake(ch)
		}
	}
	for ch := range n.asked {
		wake(ch)
	}
	for _, chans := range n.models {
		for ch := range chans {
			wake(ch)
		}
	}
	for _, chans := range n.remote {
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
	for _, token := range note.Probes {
		if v, err := strconv.ParseUint(token, 10, 64); err == nil && v > n.probeSeen.Load() {
			n.probeSeen.Store(v)
		}
	}
	if len(note.Done) > 0 {
		n.finished(note.Done)
	}
	if len(note.Cancel) > 0 {
		n.cancelled(note.Cancel)
	}
	if len(note.Streams) > 0 {
		n.streamed(note.Streams)
	}
	if note.Ready {
		n.wakeSubscribers()
	}
	if len(note.Answered) > 0 {
		n.finished(note.Answered) // inquiries' ids wait as tasks' do
	}
	if note.Inquiries {
		n.inquired()
	}
	if len(note.Models) > 0 {
		n.modelsFreed(note.Models)
	}
	if len(note.Remote) > 0 {
		n.remoteReady(note.Remote)
	}
}

// Start listens until Stop or until ctx is done, reconnecting after errors.
func (n *Notifier) Start(ctx context.Context) error {
	return n.svc.Start(ctx, func(ctx context.Context) {
		l := n.store.NewListener()
		defer func() { _ = l.Close(context.WithoutCancel(ctx)) }()
		defer func() {
			if n.deaf.Swap(false) {
				n.opts.Metrics.NotifierPolling(false) // a stopped notifier is no longer polling
			}
		}()
		backoff := service.MinBackoff
		down := service.NewOutage(n.logger, "notifier (polling continues)")
		for ctx.Err() == nil {
			err := n.listen(ctx, l, func() { backoff = service.MinBackoff; down.OK() })
			if ctx.Err() != nil {
				return
			}
			down.Failed(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = service.NextBackoff(backoff, service.MaxBackoff)
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
	defer func() {
		n.listening.Store(false)
		// Workers waiting out a long poll interval poll at the fallback
		// pace from now on: wake them to take it up.
		n.wakeSubscribers()
	}()
	up()
	// Anything may have become ready, or finished, while not listening.
	n.broadcast()
	probeCtx, stopProbing := context.WithCancel(ctx)
	probing := make(chan struct{})
	go func() { defer close(probing); n.probe(probeCtx, l) }()
	defer func() { stopProbing(); <-probing }()
	for {
		note, err := l.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.relay(note)
	}
}

// probe checks, every ProbeInterval while l is connected, that a
// notification sent through the store comes back within ProbeTimeout. A
// connection that LISTENs through a pooler in transaction mode stays
// connected and hears nothing: only a probe tells.
func (n *Notifier) probe(ctx context.Context, l store.Listener) {
	for {
		began := time.Now()
		token := n.probeNext.Add(1)
		err := l.Probe(ctx, strconv.FormatUint(token, 10))
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// The clock starts once the probe is committed: a wait for a
			// connection of a busy pool is not a lost notification.
			n.awaitProbe(ctx, token, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(began.Add(n.opts.ProbeInterval))):
		}
	}
}

// awaitProbe waits up to ProbeTimeout for probe token to come back, and
// records whether notifications are arriving.
func (n *Notifier) awaitProbe(ctx context.Context, token uint64, sent time.Time) {
	tick := time.NewTicker(max(n.opts.ProbeTimeout/20, time.Millisecond))
	defer tick.Stop()
	deadline := sent.Add(n.opts.ProbeTimeout)
	for n.probeSeen.Load() < token {
		if time.Now().After(deadline) {
			n.setDeaf(true)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	n.setDeaf(false)
}

func (n *Notifier) setDeaf(deaf bool) {
	if deaf {
		n.opts.Metrics.NotificationProbeLost()
	}
	if n.deaf.Swap(deaf) == deaf {
		return
	}
	n.opts.Metrics.NotifierPolling(deaf)
	if deaf {
		n.wakeSubscribers() // as when the listener drops: see listen
		n.logger.Warn("notifier: notifications are not arriving (a probe sent through the database did not come back; "+
			"is the listener going through a pooler in transaction mode? give it a direct or session-mode URL): workers poll every "+
			FallbackPollInterval.String()+" until they do", slog.Duration("probe_timeout", n.opts.ProbeTimeout))
		return
	}
	n.logger.Info("notifier: notifications arrive again")
}

// Stop stops listening and waits. It is idempotent.
func (n *Notifier) Stop() { n.svc.Stop() }
