// Package modellimit holds steps to their models' rate limits: before a
// step that declares a Spend naming a model with a limit runs, a
// worker's [Limiter] asks the store to admit it
// (store.Executor.ModelAdmit) and, while the sliding window is full or
// others are ahead, waits its turn holding its worker slot, woken by
// the notifier when capacity frees (a settlement, an admission that
// moves the queue, a dropped ticket) or at the time the store computed,
// with polling as the fallback. Once the step ran, [Limiter.Settle]
// replaces its reservation by what it spent.
//
// A namespace's limits are cached per worker and read again at most
// every second, so steps of models without a limit pay a map lookup.
//
// It imports engine/store, engine/internal/metrics and
// engine/internal/notifier.
package modellimit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/store"
)

// ErrStopping is returned by [Limiter.Admit] when the worker began to
// stop while the step waited: its ticket is dropped, and the attempt
// hands its task back.
var ErrStopping = errors.New("worker stopping while a step waited under its model limit")

// Config configures [New].
type Config struct {
	Store store.Store
	// Notifier wakes waiting steps when capacity frees. Nil: they poll
	// every [PollInterval].
	Notifier *notifier.Notifier
	// Owner names the worker in tickets and admissions. Required.
	Owner string
	// TicketTTL is how long a waiting ticket outlives its worker: a
	// waiting step renews it every third of it, and a dead worker's
	// holds the tickets behind it this long at most. Default the
	// default lease (30s); bounded by store.MinModelTicketTTL and
	// store.MaxModelTicketTTL.
	TicketTTL time.Duration
	// CacheTTL is how long a namespace's limits are read from the cache:
	// a limit set (or deleted) applies on every worker within it.
	// Default and maximum [MaxCacheTTL].
	CacheTTL time.Duration
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
}

// MaxCacheTTL bounds (and is the default of) Config.CacheTTL: 1s.
const MaxCacheTTL = time.Second

// PollInterval is how often a waiting step asks again while
// notifications are not arriving.
const PollInterval = time.Second

// Limiter admits steps under the model limits of one store, for one
// worker. Its methods may be called from any goroutine.
type Limiter struct {
	cfg Config

	mu    sync.Mutex
	cache map[string]*namespaceLimits // by namespace; written under mu
}

// namespaceLimits is a namespace's limits as last read.
type namespaceLimits struct {
	refresh sync.Mutex // held by the one goroutine reading them again
	read    time.Time  // when models was read; under Limiter.mu
	models  map[string]bool
}

// New returns a limiter for cfg.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, errors.New("model limiter: store and owner are required")
	}
	if cfg.TicketTTL == 0 {
		cfg.TicketTTL = 30 * time.Second
	}
	cfg.TicketTTL = min(max(cfg.TicketTTL, store.MinModelTicketTTL), store.MaxModelTicketTTL)
	if cfg.CacheTTL <= 0 || cfg.CacheTTL > MaxCacheTTL {
		cfg.CacheTTL = MaxCacheTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Limiter{cfg: cfg, cache: map[string]*namespaceLimits{}}, nil
}

// Ask is a step's ask for admission.
type Ask struct {
	Namespace   string
	Model       string
	TaskID      uuid.UUID
	Position    int
	FairnessKey string
	Tokens      int64 // the step's declared Spend.Tokens
}

// Admission is a step admitted under its model's limit.
type Admission struct {
	ID        uuid.UUID
	Namespace string
	Model     string
	Tokens    int64 // reserved
	// Waited is how long the step waited for its turn; 0: admitted at
	// its first ask.
	Waited time.Duration
	// Ahead is how many tickets were ahead of the step's when it first
	// waited.
	Ahead int
}

// Limited reports whether the model has a limit in the namespace, by
// the cache (read again when older than CacheTTL).
func (l *Limiter) Limited(ctx context.Context, namespace, model string) (bool, error) {
	l.mu.Lock()
	e := l.cache[namespace]
	if e == nil {
		e = &namespaceLimits{}
		l.cache[namespace] = e
	}
	fresh := !e.read.IsZero() && time.Since(e.read) < l.cfg.CacheTTL
	limited := e.models[model]
	l.mu.Unlock()
	if fresh {
		return limited, nil
	}
	e.refresh.Lock()
	defer e.refresh.Unlock()
	l.mu.Lock()
	fresh, limited = !e.read.IsZero() && time.Since(e.read) < l.cfg.CacheTTL, e.models[model]
	stale := !e.read.IsZero()
	l.mu.Unlock()
	if fresh {
		return limited, nil // read by the goroutine that held refresh before
	}
	list, err := l.cfg.Store.ModelLimitList(ctx, &store.ModelLimitListParams{Namespace: namespace})
	if err != nil {
		if stale {
			// Rather what was read a moment ago than a failed step.
			l.cfg.Logger.Warn("model limits: read the namespace's limits", "namespace", namespace, "err", err.Error())
			return limited, nil
		}
		return false, errors.Wrapf(err, "read the model limits of namespace %s", namespace)
	}
	models := make(map[string]bool, len(list))
	for _, m := range list {
		models[m.Model] = true
	}
	l.mu.Lock()
	e.models, e.read = models, time.Now()
	l.mu.Unlock()
	return models[model], nil
}

// Admit admits the step ask describes under its model's limit, waiting
// its turn: nil when the model has no limit. The wait ends with ctx
// (the attempt's: a lost lease, a cancel, the task's deadline, the
// step's StartToClose) and with stopping (the worker's graceful stop:
// [ErrStopping]); either way the step's ticket is dropped.
func (l *Limiter) Admit(ctx context.Context, ask Ask, stopping <-chan struct{}) (*Admission, error) {
	limited, err := l.Limited(ctx, ask.Namespace, ask.Model)
	if err != nil || !limited {
		return nil, err
	}
	key := store.ModelKey{Namespace: ask.Namespace, Model: ask.Model}
	var wake <-chan struct{}
	if l.cfg.Notifier != nil {
		// Before the first ask, so no wake-up after it is missed.
		ch, stop := l.cfg.Notifier.WaitModel(key)
		defer stop()
		wake = ch
	}
	p := &store.ModelAdmitParams{Namespace: ask.Namespace, Model: ask.Model, Ticket: uuid.New(), TaskID: ask.TaskID,
		Position: ask.Position, FairnessKey: ask.FairnessKey, Owner: l.cfg.Owner, Tokens: ask.Tokens, TicketTTL: l.cfg.TicketTTL}
	began := time.Now()
	ahead, waiting := 0, false
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		res, err := l.cfg.Store.ModelAdmit(ctx, p)
		if err != nil {
			if waiting {
				l.drop(ctx, p)
			}
			return nil, err
		}
		if !res.Limited {
			return nil, nil // deleted meanwhile (the store dropped the tickets)
		}
		if res.Admitted {
			adm := &Admission{ID: p.Ticket, Namespace: ask.Namespace, Model: ask.Model, Tokens: ask.Tokens, Ahead: ahead}
			if waiting {
				adm.Waited = time.Since(began)
			}
			l.cfg.Metrics.ModelAdmitted(ask.Namespace, ask.Model, adm.Waited, ask.Tokens)
			return adm, nil
		}
		if !waiting {
			waiting, ahead = true, res.Ahead
		}
		timer.Reset(l.nextAsk(res))
		select {
		case <-ctx.Done():
			l.drop(ctx, p)
			return nil, errors.Wrapf(context.Cause(ctx), "wait under model limit %s", ask.Model)
		case <-stopping:
			l.drop(ctx, p)
			return nil, ErrStopping
		case <-wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// nextAsk is how long a waiting step waits, unless woken, before it asks
// again: until the time the store computed for the first in turn, and
// at most a third of the ticket's TTL, which the ask renews; while
// notifications are not arriving, at most PollInterval.
func (l *Limiter) nextAsk(res store.ModelAdmission) time.Duration {
	d := l.cfg.TicketTTL / 3
	if !res.RetryAt.IsZero() {
		d = min(d, max(time.Until(res.RetryAt), 0)+time.Millisecond)
	}
	if l.cfg.Notifier == nil || !l.cfg.Notifier.Live() {
		d = min(d, PollInterval)
	}
	return d
}

// drop drops a waiting ticket, on a context that outlives ctx's end: a
// ticket left would hold the others up to its TTL.
func (l *Limiter) drop(ctx context.Context, p *store.ModelAdmitParams) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.cfg.Store.ModelTicketDrop(ctx, &store.ModelTicketDropParams{Namespace: p.Namespace, Ticket: p.Ticket}); err != nil {
		l.cfg.Logger.Warn("model limits: drop a waiting ticket (it expires on its own)", "model", p.Model, "err", err.Error())
	}
}

// Settle replaces adm's reservation by tokens, what its step spent. An
// admission settled already or removed is left be.
func (l *Limiter) Settle(ctx context.Context, adm *Admission, tokens int64) error {
	tokens = min(max(tokens, 0), store.MaxModelTokensPerMinute)
	err := l.cfg.Store.ModelSettle(ctx, &store.ModelSettleParams{Namespace: adm.Namespace, Admission: adm.ID, Tokens: tokens})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
