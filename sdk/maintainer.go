package sdk

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
)

// MaintainerConfig configures a [Maintainer]. Zero values take the
// defaults named on each field.
type MaintainerConfig struct {
	// Store is the store to maintain, as the caller made it
	// (pgstore.New, sqlitestore.New). Required unless Cells is set.
	Store store.Store
	// Cells, instead of Store, maintains every cell of a placement, each
	// with a leader lease of its own, so a cell that is down holds up only
	// its own maintenance.
	Cells *Cells
	// Owner names this process in the leader lease. Default
	// host-pid-random.
	Owner string
	// Interval between passes: at each, the maintainer takes or renews
	// the leader lease (for three intervals) and rescues expired leases,
	// and, while it leads, expires start deadlines, fires cron schedules
	// and removes finished tasks. Rescues between passes are timed to the
	// leases' expiry, and schedules fire at their ticks. Default 5s; keep
	// it no longer than the shortest lease TTL of the workers (see
	// [WorkerConfig.RescueInterval]).
	Interval time.Duration
	// DefaultRetention, DefaultKeyRetention and DefaultArchive are what
	// the leader removes, and where it archives first, in namespaces
	// without settings of their own: see [WorkerConfig.DefaultRetention],
	// [WorkerConfig.DefaultKeyRetention] and [WorkerConfig.DefaultArchive].
	DefaultRetention    time.Duration
	DefaultKeyRetention time.Duration
	DefaultArchive      string
	// Logger. Default slog.Default(); with Cells, each cell's lines name
	// it ("cell").
	Logger *slog.Logger
}

// Maintainer runs cairn's maintenance over a store without running tasks:
// the rescue of expired leases in every process and, in the one that holds
// the leader lease, start-deadline expiry, cron schedules, retention and
// archival, each its own service. It is what `cairn server` runs. Every
// [Worker] runs one of its own (see [WorkerConfig.RescueInterval]); run
// one where no worker runs, or beside workers that do not. Run as many as
// you like: one leads at a time.
type Maintainer struct {
	cells []*engine.Maintainer
}

// NewMaintainer returns a maintainer; it does nothing until started.
func NewMaintainer(cfg MaintainerConfig) (*Maintainer, error) {
	if (cfg.Store == nil) == (cfg.Cells == nil) {
		return nil, errors.New("maintainer: set one of Store and Cells")
	}
	if cfg.Owner == "" {
		cfg.Owner = engine.NewWorkerID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	stores := map[string]store.Store{"": cfg.Store}
	if cfg.Cells != nil {
		stores = cfg.Cells.Stores()
	}
	m := &Maintainer{}
	for cell, st := range stores {
		logger := cfg.Logger
		if cell != "" {
			logger = logger.With("cell", cell)
		}
		em, err := engine.NewMaintainer(engine.MaintainerConfig{Store: st, Owner: cfg.Owner, Interval: cfg.Interval, Logger: logger,
			Retention: engine.RetentionConfig{Default: cfg.DefaultRetention, KeyDefault: cfg.DefaultKeyRetention,
				DefaultArchive: cfg.DefaultArchive}})
		if err != nil {
			return nil, err
		}
		m.cells = append(m.cells, em)
	}
	return m, nil
}

// Start runs the maintenance until Stop or until ctx is done. It returns
// at once. Stop, not ctx, is the graceful end: a stopped maintainer
// resigns its leadership, so another process takes over at once; a
// cancelled ctx ends it just the same.
func (m *Maintainer) Start(ctx context.Context) error {
	for i, c := range m.cells {
		if err := c.Start(ctx); err != nil {
			stopAll(m.cells[:i])
			return err
		}
	}
	return nil
}

// Stop stops every cell's maintenance at once, each resigning its
// leadership, and returns when all have stopped: a cell cut off, its
// resignation waiting out its timeout, does not hold up the others'. It
// is idempotent.
func (m *Maintainer) Stop() { stopAll(m.cells) }

// stopAll stops every maintainer at once and waits for them.
func stopAll(ms []*engine.Maintainer) {
	var wg sync.WaitGroup
	for _, em := range ms {
		wg.Go(em.Stop)
	}
	wg.Wait()
}
