package engine

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/store"
)

func (p *Processor) claimLoop(ctx context.Context) {
	defer close(p.loopDone)
	var wake <-chan struct{}
	if p.cfg.Notifier != nil {
		ch, unsubscribe := p.cfg.Notifier.Subscribe()
		defer unsubscribe()
		wake = ch
	}
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	// backlog is whether more due work may be waiting for a slot: the last
	// claim filled every free slot, or there was no free slot to claim
	// with when woken. Only then is a freed slot worth a claim.
	backlog := false
	var retry time.Duration // the claim's backoff while the database is out of reach
	for {
		select {
		case <-p.stopping:
			return
		case <-ctx.Done():
			return
		default:
		}
		if free := p.cfg.Concurrency - p.inflightCount(); free > 0 {
			n, err := p.claim(ctx, free)
			switch {
			case err == nil:
				p.claimOutage.ok()
				retry = 0
			case ctx.Err() != nil:
			case isConnectionError(err):
				// Back off while the database is out of reach, and say so
				// once, not at every try.
				p.claimOutage.failed(err)
				retry = nextBackoff(retry, workBackoff)
				if !p.sleepUnlessStopped(ctx, retry) {
					return
				}
				continue
			default:
				p.cfg.Logger.Warn("processor: claim", errAttr(err))
			}
			backlog = err == nil && n == free
		} else {
			backlog = true
		}
		var freed <-chan struct{}
		if backlog {
			freed = p.slotFreed
		}
		select {
		case <-p.stopping:
			return
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
		case <-freed:
			// Let a few more slots free up, so a busy worker claims in
			// batches rather than a statement per finished task.
			cooldown := time.NewTimer(fetchCooldown)
			select {
			case <-cooldown.C:
			case <-p.stopping:
			case <-ctx.Done():
			}
			cooldown.Stop()
		}
	}
}

// fetchCooldown is how long a worker with a backlog waits after a slot
// frees before claiming again. New work announced by NOTIFY, and polls, are
// claimed without it.
const fetchCooldown = 10 * time.Millisecond

func (p *Processor) claim(ctx context.Context, max int) (int, error) {
	// The claim runs under baseCtx, not the work context a stop cancels: a
	// claim cut off mid-flight may still commit, and its tasks would sit
	// leased by nobody until expiry. Tasks claimed as a stop begins start
	// with a cancelled context and are released at once.
	// A database that hangs must not hold the claim loop (and Stop) for
	// longer than a lease.
	claimCtx, cancel := context.WithTimeout(p.baseCtx, p.cfg.LeaseTTL)
	defer cancel()
	sent := time.Now()
	claimed, err := p.cfg.Store.TaskClaimMany(claimCtx, &store.TaskClaimManyParams{
		Namespace: p.cfg.Namespace, Queues: p.cfg.Queues, Types: p.cfg.Types,
		Owner: p.cfg.WorkerID, Max: max, LeaseTTL: p.cfg.LeaseTTL,
	})
	if err != nil {
		return 0, err
	}
	for _, ct := range claimed {
		if ct.Err != nil {
			// Left to lease expiry (a rescuer that can read it reschedules
			// it); the others in the batch run.
			p.cfg.Logger.Error("processor: claimed task has a history this worker cannot read; not running it",
				"task_id", ct.Task.ID, errAttr(ct.Err))
			continue
		}
		leaseCtx, cancel := context.WithCancelCause(ctx)
		attemptCtx, requestCancel := context.WithCancelCause(leaseCtx)
		if ct.State.CancelRequested {
			requestCancel(ErrCancelRequested)
		}
		ref := store.LeaseRef{TaskID: ct.Task.ID, Epoch: ct.State.Lease.Epoch}
		p.mu.Lock()
		p.inflight[ref] = &inflightAttempt{lastRenewed: sent, cancel: cancel, requestCancel: requestCancel}
		p.mu.Unlock()
		p.executors.Add(1)
		go p.execute(&Attempt{Task: ct.Task, proc: p, state: ct.State, ctx: attemptCtx, leaseCtx: leaseCtx})
	}
	return len(claimed), nil
}

func (p *Processor) inflightCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}
