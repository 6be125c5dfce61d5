package maintenance

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/bucket"
)

// RetentionConfig is what the leader's pass removes: the tasks of each
// namespace that finished longer ago than its retention, whole, with their
// logs. A namespace's own settings ([store.Store.NamespaceSet]) win over
// these defaults.
type RetentionConfig struct {
	// Default is the retention of a namespace without its own. 0: its
	// finished tasks are kept.
	Default time.Duration
	// KeyDefault is how long a removed task's idempotency key stays taken
	// in a namespace without its own key retention. Default 24h.
	KeyDefault time.Duration
	// Batch is the most tasks one removal transaction takes. Default 500,
	// at most maxRetentionBatch.
	Batch int
	// Budget is the most time one leader pass spends removing; the rest
	// waits for the next pass. Default a tenth of the pass interval, so
	// that a backlog of removals (a retention shortened, a first run over
	// a large table) takes a bounded share of the database from the work
	// running meanwhile.
	Budget time.Duration
	// DefaultArchive is where a namespace without an archive of its own
	// has its histories written before they are removed (see
	// bucket.Open); empty: such namespaces' tasks are removed without
	// a copy.
	DefaultArchive string
	// Archives opens the archives; nil: the rescuer's own.
	Archives *archive.Buckets
}

func (c RetentionConfig) withDefaults() RetentionConfig {
	if c.KeyDefault <= 0 {
		c.KeyDefault = 24 * time.Hour
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	c.Batch = min(c.Batch, maxRetentionBatch)
	if c.Archives == nil {
		c.Archives = &archive.Buckets{}
	}
	return c
}

// maxRetentionBatch bounds a removal transaction.
const maxRetentionBatch = 10_000

func (c RetentionConfig) validate() error {
	if c.DefaultArchive != "" {
		if _, err := bucket.Parse(c.DefaultArchive); err != nil {
			return errors.Wrap(err, "engine: RetentionConfig.DefaultArchive")
		}
	}
	if c.Default < 0 || c.KeyDefault < 0 || c.Budget < 0 {
		return errors.Newf("engine: RetentionConfig's durations must not be negative (Default %s, KeyDefault %s, Budget %s)",
			c.Default, c.KeyDefault, c.Budget)
	}
	return nil
}

// removeFinished runs retention for every namespace, batch after batch,
// until nothing is left to remove or the pass has used its budget (the
// rest waits for the next pass, so rescues and schedules are never held
// up by a backlog of removals). It reports the tasks and events removed;
// a namespace whose removal fails is reported and the others go on.
// A pass begins with the namespace after *next (the first one the last
// pass did not reach) and sets it for the next pass, so a namespace that
// uses up the budget, or fails slowly, does not keep the others waiting.
func removeFinished(ctx context.Context, s, stored store.Store, clock store.Clock, cfg RetentionConfig, budget time.Duration, next *string) (store.RemoveResult, error) {
	var total store.RemoveResult
	namespaces, err := s.NamespaceList(ctx)
	if err != nil {
		return total, err
	}
	// The default archive is shared through the database: a leader given
	// one records it, a leader without one takes the recorded one, so no
	// leader removes without the copy another was told to make.
	var recorded string
	for i, ns := range namespaces {
		if ns.Name == store.DefaultsRow {
			recorded = ns.Archive
			namespaces = append(namespaces[:i:i], namespaces[i+1:]...)
			break
		}
	}
	defaultArchive := cfg.DefaultArchive
	switch {
	case defaultArchive == "":
		defaultArchive = recorded
	case defaultArchive != recorded:
		err := s.NamespaceSet(ctx, store.NamespaceConfig{Name: store.DefaultsRow, Archive: defaultArchive})
		if err != nil {
			return total, errors.Wrap(err, "record the default archive")
		}
	}
	// Round robin: namespaces from *next on, then the ones before it.
	first := 0
	for first < len(namespaces) && namespaces[first].Name < *next {
		first++
	}
	namespaces = append(namespaces[first:], namespaces[:first]...)
	var errs error
	until := time.Now().Add(budget)
	for i, ns := range namespaces {
		if i+1 < len(namespaces) {
			*next = namespaces[i+1].Name
		} else {
			*next = ""
		}
		retention, keyRetention := ns.Retention, ns.KeyRetention
		if retention == 0 {
			retention = cfg.Default
		}
		if keyRetention == 0 {
			keyRetention = cfg.KeyDefault
		}
		if retention == 0 && len(ns.TypeRetention) == 0 {
			continue
		}
		location := ns.Archive
		if location == "" {
			location = defaultArchive
		}
		for {
			now := clock.Now()
			p := &store.RemoveFinishedParams{
				Namespace: ns.Name, Max: cfg.Batch, KeysUntil: now.Add(keyRetention),
			}
			if retention > 0 { // else only the types with a retention of their own go
				p.Before = now.Add(-retention)
			}
			if len(ns.TypeRetention) > 0 {
				p.TypeBefore = make(map[string]time.Time, len(ns.TypeRetention))
				for typ, d := range ns.TypeRetention {
					p.TypeBefore[typ] = now.Add(-d)
				}
			}
			var res store.RemoveResult
			var err error
			if location != "" {
				res, err = archiveThenRemove(ctx, s, stored, cfg.Archives, location, p)
			} else {
				res, err = removeTasks(ctx, s, cfg.Archives, p)
			}
			total.Tasks, total.Events = total.Tasks+res.Tasks, total.Events+res.Events
			if err != nil {
				if ctx.Err() != nil {
					return total, err
				}
				errs = errors.CombineErrors(errs, err)
				break
			}
			if res.Tasks < cfg.Batch || time.Now().After(until) {
				break
			}
		}
		if time.Now().After(until) {
			break
		}
	}
	return total, errs
}
