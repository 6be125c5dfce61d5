package sdk

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/store"
)

// DefaultExpectedFailover is [WorkerConfig.ExpectedFailover]'s default for
// a worker whose pool names several hosts: Patroni's default ttl, the
// least its failover takes when the leader's node is lost (up to a
// loop_wait more).
const DefaultExpectedFailover = 30 * time.Second

// RideOut is the longest database outage (a failover, say) a worker with
// these lease settings surely rides out with its running attempts intact:
// LeaseTTL − 2 × HeartbeatInterval, with their defaults. The last renewal
// before the outage may be a heartbeat old, and at the first heartbeat
// after LeaseTTL − HeartbeatInterval without a renewal the worker stops
// the attempt (so that a rescuer cannot hand it to another worker while
// it still runs). It holds if the first renewal after the outage,
// reconnect included, fits in a heartbeat. A longer outage abandons the
// attempts, which run again once their leases expire.
func (cfg WorkerConfig) RideOut() time.Duration {
	ttl := cfg.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	hb := cfg.HeartbeatInterval
	if hb <= 0 {
		hb = ttl / 3
	}
	return max(0, ttl-2*hb)
}

// expectedFailover is ExpectedFailover with its default: 0 (no check)
// unless the pool names several hosts.
func (w *Worker) expectedFailover() time.Duration {
	if w.cfg.ExpectedFailover > 0 {
		return w.cfg.ExpectedFailover
	}
	for _, pool := range w.pools() {
		if poolHosts(pool) > 1 {
			return DefaultExpectedFailover
		}
	}
	return 0
}

// pools returns the PostgreSQL pools the worker's stores use: Pool, a
// PostgreSQL Store the caller made, or each cell's.
func (w *Worker) pools() []*pgxpool.Pool {
	type pooled interface{ Pool() *pgxpool.Pool }
	if w.cfg.Pool != nil {
		return []*pgxpool.Pool{w.cfg.Pool}
	}
	var stores []store.Store
	if w.cfg.Cells != nil {
		for _, name := range w.cfg.Cells.Names() {
			stores = append(stores, w.cfg.Cells.Store(name))
		}
	} else {
		stores = append(stores, w.cfg.Store)
	}
	var pools []*pgxpool.Pool
	for _, st := range stores {
		if p, ok := st.(pooled); ok {
			pools = append(pools, p.Pool())
		}
	}
	return pools
}

// warnIfLeasesEndInAFailover warns, once at Start, when the leases would
// not ride out the expected failover.
func (w *Worker) warnIfLeasesEndInAFailover() {
	failover := w.expectedFailover()
	rideOut := w.cfg.RideOut()
	if failover == 0 || rideOut >= failover {
		return
	}
	w.cfg.Logger.Warn(fmt.Sprintf("worker: the leases ride out a database outage of %s at most (LeaseTTL - 2 x HeartbeatInterval), "+
		"less than the expected failover of %s: a longer outage abandons running attempts, which run again; "+
		"lengthen LeaseTTL or shorten HeartbeatInterval (docs/patroni.md, Leases)", rideOut, failover),
		"ride_out", rideOut, "expected_failover", failover)
}

// poolHosts counts the distinct servers a pool's connection string names
// (host and port): a URL of several is a failover setup. TLS fallbacks of
// one server (sslmode=prefer) count once.
func poolHosts(pool *pgxpool.Pool) int {
	cc := pool.Config().ConnConfig
	hosts := map[string]bool{fmt.Sprintf("%s:%d", cc.Host, cc.Port): true}
	for _, fb := range cc.Fallbacks {
		hosts[fmt.Sprintf("%s:%d", fb.Host, fb.Port)] = true
	}
	return len(hosts)
}
