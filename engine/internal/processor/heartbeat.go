package processor

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
)

func (p *Processor) heartbeatLoop(ctx context.Context) {
	defer close(p.heartbeatDone)
	ticker := time.NewTicker(p.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.heartbeat(ctx)
		}
	}
}

// heartbeat renews every in-flight lease in one statement and cancels the
// attempts whose lease is gone. An attempt whose lease could not be renewed
// is cancelled one heartbeat before the database would let it expire, so it
// stops before a rescuer can hand the task to someone else.
func (p *Processor) heartbeat(ctx context.Context) {
	p.mu.Lock()
	leases := make([]store.LeaseRef, 0, len(p.inflight))
	for ref := range p.inflight {
		leases = append(leases, ref)
	}
	p.mu.Unlock()
	if len(leases) == 0 {
		// Nothing to renew is no news of the database: an outage the
		// heartbeat reported ends only when the database answers, or its
		// report would stay open while the worker idles.
		if p.renewOutage.Down() {
			p.checkRenewOutage(ctx)
		}
		return
	}
	// The database measures the new expiry from when the statement runs,
	// which is after sent: sent is the safe renewal time to remember.
	sent := time.Now()
	hbCtx, cancel := context.WithTimeout(ctx, p.cfg.HeartbeatInterval)
	held, err := p.cfg.Store.LeaseExtendMany(hbCtx, &store.LeaseExtendParams{Leases: leases, TTL: p.cfg.LeaseTTL})
	cancel()
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ref := range leases {
		in := p.inflight[ref]
		if in == nil {
			continue
		}
		renewal, ok := held[ref.TaskID]
		switch {
		case err == nil && ok && renewal.Busy:
			// Held, not extended: as a failed heartbeat, the attempt stops
			// only if the lease is about to run out.
			if now.Sub(in.lastRenewed) > p.cfg.LeaseTTL-p.cfg.HeartbeatInterval {
				in.cancel(ErrLeaseLost)
			}
			if renewal.CancelRequested {
				in.requestCancel(ErrCancelRequested)
			}
		case err == nil && ok:
			in.lastRenewed = sent
			if renewal.CancelRequested {
				in.requestCancel(ErrCancelRequested)
			}
		case err == nil:
			in.cancel(ErrLeaseLost)
		case now.Sub(in.lastRenewed) > p.cfg.LeaseTTL-p.cfg.HeartbeatInterval:
			in.cancel(ErrLeaseLost)
		}
	}
	switch {
	case err == nil:
		p.renewOutage.OK()
	case ctx.Err() != nil:
	case service.Unavailable(err):
		p.renewOutage.Failed(err)
	default:
		p.cfg.Logger.Warn("processor: renew leases", service.ErrAttr(err))
	}
}

// checkRenewOutage asks the database whether it answers again, for an
// outage the heartbeat reported when it has no lease left to renew.
func (p *Processor) checkRenewOutage(ctx context.Context) {
	pingCtx, cancel := context.WithTimeout(ctx, p.cfg.HeartbeatInterval)
	defer cancel()
	switch err := p.cfg.Store.Ping(pingCtx); {
	case err == nil:
		p.renewOutage.OK()
	case ctx.Err() == nil:
		p.renewOutage.Failed(err)
	}
}
