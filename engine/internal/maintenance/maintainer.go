package maintenance

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/leadership"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// Config configures a [Maintainer].
type Config struct {
	Store store.Store
	// Owner identifies this process in the leader lease. Required.
	Owner string
	// Interval between passes. Default 5s. At each pass the maintainer
	// takes or renews the leader lease (for three intervals), the lease
	// rescuer rescues, and, while this process leads, each leader service
	// does its work. Rescues between passes are timed to the leases'
	// expiry, which each pass and each rescue read again, so a lease taken
	// after a pass is seen by the next one: keep Interval no longer than
	// the shortest lease TTL of the workers, or a crash right after a
	// claim may wait up to Interval − TTL more.
	Interval time.Duration
	// Clock tells the time of the rescues it writes; give the store the
	// same one. Default [store.WallClock].
	Clock store.Clock
	// Retention is what the leader removes at each pass (finished tasks
	// past their namespace's retention). Its zero value removes only in
	// namespaces that set their own retention.
	Retention RetentionConfig
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// leaderName is the leader lease's name. It says "rescuer" because the
// lease row of running deployments is named so.
const leaderName = "rescuer"

// Maintainer runs the maintenance services of one store, one per job, as
// River's queue maintainer does: the lease rescuer in every process, and,
// while this process holds the leader lease, the start-deadline expirer,
// the cron firer, retention, the archiver and the index summarizer, each
// in a loop of its own, started when this process becomes the leader and
// stopped when it stops being one. An elector
// (engine/internal/leadership) takes and renews the lease at every pass.
//
// Every process may run one, and every one rescues: a rescue is a fenced
// append (see [RescueExpired]), safe whoever makes it, so a dead worker's
// tasks do not wait for leadership to pass on when the dead worker led.
// Each lease rescuer sleeps until the next lease expiry it knows of (read
// at every pass and after every rescue) rather than for a fixed interval.
// The leader's rescues a lease as soon as it expires; the others only once
// it has been expired for their grace (rescueGrace, and a share of it
// drawn per process), so they do not race a live leader for the same
// histories but take over within the grace when it is dead or busy.
type Maintainer struct {
	cfg     Config
	svc     service.Base
	elector *leadership.Elector
	// grace is how long a lease must have been expired before this
	// process's rescuer, when not the leader, rescues it.
	grace time.Duration
	// leading are the leader's services, started and stopped by the run
	// loop only.
	leading []leaderService
}

// leaderService is a maintenance service run while this process leads:
// started when it becomes the leader, stopped when it is no longer.
type leaderService interface {
	Start(ctx context.Context) error
	Stop()
}

// New returns a maintainer; it does nothing until started.
func New(cfg Config) (*Maintainer, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, errors.New("engine: MaintainerConfig needs Store and Owner")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = store.WallClock
	}
	if err := cfg.Retention.validate(); err != nil {
		return nil, err
	}
	cfg.Retention = cfg.Retention.withDefaults()
	if cfg.Retention.Budget <= 0 {
		cfg.Retention.Budget = cfg.Interval / 10
	}
	elector, err := leadership.New(leadership.Config{Store: cfg.Store, Name: leaderName, Owner: cfg.Owner,
		Interval: cfg.Interval, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Maintainer{
		cfg:     cfg,
		elector: elector,
		grace:   rescueGrace + rand.N(rescueGrace/2),
		leading: []leaderService{
			&expirer{cfg: cfg},
			&cron{cfg: cfg},
			&retention{cfg: cfg},
			&archiver{cfg: cfg},
			&summarizer{cfg: cfg},
		},
	}, nil
}

// Start runs the maintenance until Stop or until ctx is done.
func (m *Maintainer) Start(ctx context.Context) error {
	return m.svc.Start(ctx, m.run)
}

// Stop stops every service, resigns the leader lease, and waits. It is
// idempotent.
func (m *Maintainer) Stop() { m.svc.Stop() }

func (m *Maintainer) run(ctx context.Context) {
	// The elector runs until the leader's services have stopped, so its
	// resignation comes after their last write.
	_ = m.elector.Start(context.WithoutCancel(ctx))
	// A rescuer of this run's own: none of an earlier run's attempts
	// reaches it.
	rescuer := newRescuer(m.cfg, m.grace)
	_ = rescuer.Start(ctx)
	leading := false
	defer func() {
		if leading {
			m.stopLeading()
		}
		m.elector.Stop()
		rescuer.Stop()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-m.elector.Attempts():
			rescuer.elected(a)
			switch {
			case a.Leader && !leading:
				for _, s := range m.leading {
					_ = s.Start(ctx) // refused only while running, which a stopped service is not
				}
			case !a.Leader && leading:
				m.stopLeading()
			}
			leading = a.Leader
		}
	}
}

// stopLeading stops the leader's services at once and waits for them.
func (m *Maintainer) stopLeading() {
	var wg sync.WaitGroup
	for _, s := range m.leading {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// every runs pass at once and then at every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, pass func(ctx context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
