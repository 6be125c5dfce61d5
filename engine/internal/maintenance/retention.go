package maintenance

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/bucket"
)

// RetentionConfig is what the leader's retention and archiver remove: the
// tasks of each namespace that finished longer ago than its retention, whole, with their
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
	// Budget is the most time one pass of retention, and one of the
	// archiver, spends removing; the rest waits for the next pass. Default
	// a tenth of the pass interval, so that a backlog of removals (a
	// retention shortened, a first run over a large table) takes a bounded
	// share of the database from the work running meanwhile.
	Budget time.Duration
	// DefaultArchive is where a namespace without an archive of its own
	// has its histories written before they are removed (see
	// bucket.Open); empty: such namespaces' tasks are removed without
	// a copy.
	DefaultArchive string
	// Archives opens the archives; nil: the maintainer's own.
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

// retention is the leader's service that removes, at each pass, the
// finished tasks past their retention (whole, with their logs) in the
// namespaces whose tasks go to no archive. The archiver does the same
// where they go to one.
type retention struct {
	cfg Config
	svc service.Base
	// next is the namespace the next pass begins with (see
	// removeFinished). Only the service's goroutine uses it.
	next string
}

// Start removes finished tasks until Stop or until ctx is done.
func (r *retention) Start(ctx context.Context) error {
	return r.svc.Start(ctx, func(ctx context.Context) { every(ctx, r.cfg.Interval, r.pass) })
}

// Stop stops removing and waits.
func (r *retention) Stop() { r.svc.Stop() }

// pass removes within the budget: finished tasks, then stream entries
// past their namespace's stream TTL, then old inquiries.
func (r *retention) pass(ctx context.Context) {
	res, err := removeFinished(ctx, r.cfg.Store, r.cfg.Clock, r.cfg.Retention, r.cfg.Retention.Budget, &r.next, false)
	logRemoved(ctx, r.cfg.Logger, res, err)
	n, err := RemoveExpiredStreams(ctx, r.cfg.Store, r.cfg.Clock, r.cfg.Retention.Batch, r.cfg.Retention.Budget)
	if n > 0 {
		r.cfg.Logger.Info("rescuer: removed stream entries past their namespace's stream TTL", "entries", n)
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("rescuer: remove expired stream entries", service.ErrAttr(err))
	}
	if err := removeInquiries(ctx, r.cfg.Store); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("rescuer: remove inquiries", service.ErrAttr(err))
	}
	if err := removeModelAdmissions(ctx, r.cfg.Store); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("rescuer: remove model admissions", service.ErrAttr(err))
	}
}

// RemoveExpiredStreams removes the stream entries older than their
// namespace's stream TTL (store.NamespaceConfig.StreamTTL; namespaces
// without one keep them as long as their tasks), batch entries per
// statement, within budget (0: none), and returns how many it removed.
func RemoveExpiredStreams(ctx context.Context, s store.Store, clock store.Clock, batch int, budget time.Duration) (int, error) {
	namespaces, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
	if err != nil {
		return 0, err
	}
	if batch <= 0 {
		batch = 500
	}
	until := time.Now().Add(budget)
	total := 0
	var errs error
	for _, ns := range namespaces {
		if ns.StreamTTL <= 0 || ns.Name == store.DefaultsRow {
			continue
		}
		for {
			n, err := s.StreamRemoveExpired(ctx, &store.StreamRemoveExpiredParams{Namespace: ns.Name, Before: clock.Now().Add(-ns.StreamTTL), Max: batch})
			total += n
			if err != nil {
				errs = errors.CombineErrors(errs, err)
				break
			}
			if n < batch || (budget > 0 && time.Now().After(until)) {
				break
			}
		}
		if budget > 0 && time.Now().After(until) {
			break
		}
	}
	return total, errs
}

// InquiryKeep is how long an inquiry is kept once answered, or once past
// its deadline unanswered, before retention removes it: an hour, long
// enough for an asker that lost its connection to read the answer again.
const InquiryKeep = time.Hour

// inquiryRemoveBatch and inquiryRemoveRounds bound a pass's removal of
// inquiries: at most 10 statements of 1,000 rows; the rest waits for the
// next pass.
const (
	inquiryRemoveBatch  = 1000
	inquiryRemoveRounds = 10
)

// removeInquiries removes the inquiries answered, or past their
// deadline, more than InquiryKeep ago, in every namespace.
func removeInquiries(ctx context.Context, s store.Store) error {
	for range inquiryRemoveRounds {
		n, err := s.InquiryRemoveExpired(ctx, &store.InquiryRemoveExpiredParams{Keep: InquiryKeep, Max: inquiryRemoveBatch})
		if err != nil || n < inquiryRemoveBatch {
			return err
		}
	}
	return nil
}

// ModelAdmissionKeep is how long a model limit's admissions are kept
// before retention removes them: five windows, so what an operator (or
// a test) reads of the last minutes is there, and the window (one
// minute) never misses one.
const ModelAdmissionKeep = 5 * store.ModelLimitWindow

// removeModelAdmissions removes the model limits' admissions older than
// ModelAdmissionKeep, and waiting tickets expired as long, in every
// namespace, in the rounds and batches of inquiries'.
func removeModelAdmissions(ctx context.Context, s store.Store) error {
	for range inquiryRemoveRounds {
		n, err := s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: ModelAdmissionKeep, Max: inquiryRemoveBatch})
		if err != nil || n < inquiryRemoveBatch {
			return err
		}
	}
	return nil
}

// logRemoved logs what a pass of retention or of the archiver removed, and
// its failure.
func logRemoved(ctx context.Context, logger *slog.Logger, res store.RemoveResult, err error) {
	if res.Tasks > 0 {
		logger.Info("rescuer: removed finished tasks past their retention", "tasks", res.Tasks, "events", res.Events)
	}
	if err != nil && ctx.Err() == nil {
		logger.Warn("rescuer: remove finished tasks", service.ErrAttr(err))
	}
}

// removeFinished runs retention for every namespace whose removed tasks
// go to an archive (archived) or for every one whose do not (!archived),
// batch after batch, until nothing is left to remove or the pass has used
// its budget (the rest waits for the next pass, so a backlog of removals
// takes a bounded share of the database). It reports the tasks and events
// removed; a namespace whose removal fails is reported and the others go
// on. A pass begins with the namespace after *next (the first one the
// last pass did not reach) and sets it for the next pass, so a namespace
// that uses up the budget, or fails slowly, does not keep the others
// waiting.
func removeFinished(ctx context.Context, s store.Store, clock store.Clock, cfg RetentionConfig, budget time.Duration, next *string, archived bool) (store.RemoveResult, error) {
	var total store.RemoveResult
	namespaces, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
	if err != nil {
		return total, err
	}
	// The default archive is shared through the database: a leader given
	// one records it (its archiver does), a leader without one takes the
	// recorded one, so no leader removes without the copy another was told
	// to make.
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
	case defaultArchive != recorded && archived:
		err := s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: store.DefaultsRow, Archive: defaultArchive})
		if err != nil {
			return total, errors.Wrap(err, "record the default archive")
		}
	}
	// This pass's namespaces: those whose tasks go to an archive, or
	// those whose do not.
	namespaces = slices.DeleteFunc(namespaces, func(ns store.NamespaceConfig) bool {
		return (archiveOf(ns, defaultArchive) != "") != archived
	})
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
		location := archiveOf(ns, defaultArchive)
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
				res, err = archiveThenRemove(ctx, s, cfg.Archives, location, p)
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

// archiveOf is where the removed tasks of ns go: its own archive, else the
// default ("": none).
func archiveOf(ns store.NamespaceConfig, defaultArchive string) string {
	if ns.Archive != "" {
		return ns.Archive
	}
	return defaultArchive
}
