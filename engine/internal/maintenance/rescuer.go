package maintenance

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/internal/leadership"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

// rescueGrace is the least time a lease must have been expired before a
// rescuer that does not lead rescues it; each rescuer adds a random share
// of up to half of it, so the others do not all wake at once. Short enough
// that a dead worker's tasks run again within a second of their lease's
// expiry whoever led; long enough for a live leader, which rescues at the
// expiry, to get there first.
const rescueGrace = 500 * time.Millisecond

// rescueBatch is how many expired leases one rescue lists at a time.
const rescueBatch = 100

// leaseWaitSlack is added to the wait for a lease's expiry: the store
// lists leases expired strictly before its now, so a wake exactly at the
// expiry would find nothing and wait again.
const leaseWaitSlack = time.Millisecond

// rescuer is the lease rescuer, the maintenance service every process
// runs, leader or not: after each of the elector's attempts that the
// database answered it rescues the expired leases (see [RescueExpired]),
// and between attempts it rescues each lease at its expiry (the leader) or
// its grace after (the others).
type rescuer struct {
	cfg Config
	svc service.Base
	// grace is how long a lease must have been expired before this
	// rescuer, when not the leader, rescues it.
	grace time.Duration
	// attempts has the elector's latest attempt not yet taken: capacity
	// 1, a newer one replacing it (see elected).
	attempts chan leadership.Attempt
}

func newRescuer(cfg Config, grace time.Duration) *rescuer {
	return &rescuer{cfg: cfg, grace: grace, attempts: make(chan leadership.Attempt, 1)}
}

// elected hands the rescuer what the elector's latest attempt found,
// replacing one it has not taken yet. It does not block.
func (r *rescuer) elected(a leadership.Attempt) {
	for {
		select {
		case r.attempts <- a:
			return
		default:
		}
		select {
		case <-r.attempts:
		default:
		}
	}
}

// Start runs the rescuer until Stop or until ctx is done.
func (r *rescuer) Start(ctx context.Context) error { return r.svc.Start(ctx, r.run) }

// Stop stops the rescuer and waits for it.
func (r *rescuer) Stop() { r.svc.Stop() }

func (r *rescuer) run(ctx context.Context) {
	lease := time.NewTimer(time.Hour)
	lease.Stop()
	defer lease.Stop()
	// Remote steps' claims on a loop of their own: waking this one would
	// reset the wait for a lease's expiry.
	remoteDone := make(chan struct{})
	go func() {
		defer close(remoteDone)
		r.remoteLoop(ctx)
	}()
	defer func() { <-remoteDone }()
	// leader is what the latest attempt found; elected, whether one has
	// come yet (before it, nothing is known to wait for).
	var leader, elected bool
	for {
		var leaseDue <-chan time.Time
		if elected {
			if in, ok := r.nextLeaseExpiry(ctx, leader); ok {
				lease.Reset(in + leaseWaitSlack)
				leaseDue = lease.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case a := <-r.attempts:
			leader, elected = a.Leader, true
			if a.Answered {
				r.rescue(ctx, leader)
			}
		case <-leaseDue:
			r.rescue(ctx, leader)
		}
		lease.Stop()
	}
}

// remoteRescueEvery is how often a rescuer looks for remote steps whose
// claim's lease ended: a claim's lease is at least a second
// (store.MinRemoteHeartbeat), so its step runs again within about a
// second of the lease's end, plus the workflow's backoff.
const remoteRescueEvery = time.Second

// remoteLoop rescues remote steps' claims every remoteRescueEvery until
// ctx ends.
func (r *rescuer) remoteLoop(ctx context.Context) {
	tick := time.NewTicker(remoteRescueEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.rescueRemote(ctx, n%remoteSweepEvery == 0)
		}
	}
}

// remoteSweepEvery is how many remote rescues pass between sweeps of the
// rows of finished tasks: a sweep reads the whole table, the rescue an
// index of claims.
const remoteSweepEvery = 60

// rescueRemote fails the attempts of remote steps whose claim's lease
// ended, and removes the rows of finished tasks (requests.ExpireRemote).
func (r *rescuer) rescueRemote(ctx context.Context, sweep bool) {
	n, err := requests.ExpireRemote(ctx, r.cfg.Store, rescueBatch, sweep)
	if err != nil {
		if ctx.Err() == nil && !service.Unavailable(err) {
			r.cfg.Logger.Warn("rescuer: expire remote steps' claims", service.ErrAttr(err))
		}
		return
	}
	if n > 0 {
		r.cfg.Logger.Info("rescuer: failed remote steps whose claim's lease ended", "count", n)
	}
}

// leaseParams selects the leases this rescuer rescues: every expired one
// when it leads, else those expired for its grace.
func (r *rescuer) leaseParams(leader bool) *store.LeaseExpiryParams {
	p := &store.LeaseExpiryParams{Max: rescueBatch}
	if !leader {
		p.ExpiredFor = r.grace
	}
	return p
}

// nextLeaseExpiry returns how long until the next lease this rescuer
// would rescue expires (see leaseParams), if one is held.
func (r *rescuer) nextLeaseExpiry(ctx context.Context, leader bool) (time.Duration, bool) {
	in, ok, err := r.cfg.Store.TaskLeaseNextExpiry(ctx, r.leaseParams(leader))
	if err != nil {
		if ctx.Err() == nil && !service.Unavailable(err) {
			r.cfg.Logger.Warn("rescuer: read the next lease expiry", service.ErrAttr(err))
		}
		return 0, false
	}
	return in, ok
}

// rescue rescues, in batches, the expired leases leaseParams selects. A
// batch that rescued none of a full list (histories this process cannot
// read, or another rescuer quicker at each) ends it, so it does not spin
// on them; the next pass lists them again.
func (r *rescuer) rescue(ctx context.Context, leader bool) {
	p := r.leaseParams(leader)
	for {
		n, listed, err := rescueExpired(ctx, r.cfg.Store, r.cfg.Clock, p)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("rescuer: rescue expired leases", service.ErrAttr(err))
			}
			return
		}
		if n > 0 {
			r.cfg.Logger.Info("rescuer: rescued tasks with expired leases", "count", n, "leader", leader)
		}
		if listed < p.Max || n == 0 {
			return
		}
	}
}
