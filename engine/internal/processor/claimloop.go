package processor

import (
	"context"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/google/uuid"
)

// claimLoop claims while slots are free and work is due, then waits for
// what can make a claim worth trying: a notification (new work, a freed
// slot of a limited queue anywhere), a slot of its own freeing while work
// waits for one, the next due time it knows of (the store's outlook, or a
// retry or timer its own attempts set), or the poll interval, whichever
// comes first. The poll is the fallback for what nothing announces (lost
// notifications, work written by a clock the worker cannot see).
func (p *Processor) claimLoop(ctx context.Context) {
	defer close(p.loopDone)
	var wake <-chan struct{}
	if p.cfg.Notifier != nil {
		ch, unsubscribe := p.cfg.Notifier.Subscribe()
		defer unsubscribe()
		wake = ch
	}
	timer := time.NewTimer(p.cfg.PollInterval)
	defer timer.Stop()
	var retry time.Duration // the claim's backoff while the database is out of reach
	var skew time.Duration  // the wait for a due time the database does not agree is due yet
	for {
		select {
		case <-p.stopping:
			return
		case <-ctx.Done():
			return
		default:
		}
		var next nextClaim
		if free := p.cfg.Concurrency - p.inflightCount(); free > 0 {
			began := time.Now()
			p.localDue.begin()
			res, err := p.claim(ctx, free)
			switch {
			case err == nil:
				p.claimOutage.OK()
				retry = 0
			case ctx.Err() != nil:
			case service.Unavailable(err):
				// Back off while the database is out of reach, and say so
				// once, not at every try.
				p.claimOutage.Failed(err)
				p.localDue.failed()
				retry = service.NextBackoff(retry, service.WorkBackoff)
				if !p.sleepUnlessStopped(ctx, retry) {
					return
				}
				continue
			default:
				p.cfg.Logger.Warn("processor: claim", service.ErrAttr(err))
			}
			if err != nil {
				// The claim saw nothing: its due times are still to claim,
				// but after a poll, not at once (a claim that keeps failing
				// must not run at the pace of past due times).
				p.localDue.failed()
				next = nextClaim{pollOnly: true}
			} else {
				p.localDue.seen()
				next = nextClaim{full: len(res.Tasks) == free, heldBack: res.HeldBack, at: res.NextAt}
				next.at, skew = skewedDue(next.at, began, skew, p.cfg.PollInterval)
			}
		} else {
			// No slot to claim with: only a freed one matters (the work due
			// meanwhile is claimed then).
			next = nextClaim{full: true}
		}
		if !p.waitToClaim(ctx, next, wake, timer) {
			return
		}
	}
}

// skewedDue guards against a database clock behind the worker's: a next
// due time the claim returns that is already past by the worker's clock
// when the claim began was not claimable by the database's. Claiming again
// at once would spin until the clocks agree, so the wait for it doubles
// (from minClaimWait, at most poll) while the database keeps answering so.
func skewedDue(at, began time.Time, skew, poll time.Duration) (time.Time, time.Duration) {
	if at.IsZero() || at.After(began) {
		return at, 0
	}
	skew = min(max(2*skew, minClaimWait), poll)
	return time.Now().Add(skew), skew
}

// nextClaim is what the last claim said about when to claim again.
type nextClaim struct {
	// full: the claim filled every free slot (or there was none), so more
	// may be due at once; a freed slot is worth a claim.
	full bool
	// heldBack: a queue's concurrency limit left due work waiting; a freed
	// slot is worth a claim.
	heldBack bool
	// at: the store's next due time of the claim's work (zero: none known).
	at time.Time
	// pollOnly: the claim failed; wait for the poll (or a notification),
	// not for a due time.
	pollOnly bool
}

// minClaimWait is the shortest wait for a due time: a time already past
// by this worker's clock may not be yet by the database's, so the loop
// does not spin on it.
const minClaimWait = time.Millisecond

// waitToClaim waits until a claim is worth trying again after next; it
// reports false when the processor stops or ctx ends first. A retry or
// timer set by this worker's own attempts meanwhile moves the wait
// earlier without a claim.
func (p *Processor) waitToClaim(ctx context.Context, next nextClaim, wake <-chan struct{}, timer *time.Timer) bool {
	var freed <-chan struct{}
	if next.full || next.heldBack {
		freed = p.slotFreed
	}
	for {
		wait := p.pollInterval()
		if !next.full && !next.pollOnly { // with no slot free, a due task waits for one anyway
			if at := earliest(next.at, p.localDue.earliest()); !at.IsZero() {
				wait = min(wait, max(time.Until(at), minClaimWait))
			}
		}
		resetTimer(timer, wait)
		select {
		case <-p.stopping:
			return false
		case <-ctx.Done():
			return false
		case <-p.localDue.armed:
			continue // wait again, to the new earliest
		case <-wake:
		case <-timer.C:
		case <-freed:
			if next.full {
				// Let a few more slots free up, so a busy worker claims in
				// batches rather than a statement per finished task. A
				// slot a limit held back is scarce: claimed at once.
				if !p.sleepUnlessStopped(ctx, fetchCooldown) {
					return false
				}
			}
		}
		return true
	}
}

// resetTimer sets t to fire after d. Since Go 1.23 a Reset discards a
// fire not yet received, so the loop never wakes for a stale deadline.
func resetTimer(t *time.Timer, d time.Duration) { t.Reset(d) }

// earliest returns the earlier of a and b, where zero means none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// fetchCooldown is how long a worker with a backlog waits after a slot
// frees before claiming again. New work announced by NOTIFY, and polls, are
// claimed without it.
const fetchCooldown = 10 * time.Millisecond

// localDue holds the run times this worker's own appends set (a retry's,
// a durable timer's, a released task's) until a claim has seen them: the
// worker knows them before any claim's outlook can.
type localDue struct {
	armed chan struct{} // capacity 1: a time was armed since the loop last looked

	mu       sync.Mutex
	at       time.Time // the earliest armed and not yet handed to a claim; zero: none
	claiming time.Time // the earliest armed before the claim under way began; zero: none
}

func newLocalDue() *localDue { return &localDue{armed: make(chan struct{}, 1)} }

// arm records that work of this worker's is due at at.
func (d *localDue) arm(at time.Time) {
	d.mu.Lock()
	d.at = earliest(d.at, at)
	d.mu.Unlock()
	select {
	case d.armed <- struct{}{}:
	default:
	}
}

// begin hands the times armed so far to the claim about to begin: their
// appends have committed, so its outlook covers them. Times armed during
// the claim stay, for the next.
func (d *localDue) begin() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claiming = earliest(d.claiming, d.at)
	d.at = time.Time{}
}

// seen forgets the times the claim that ended was handed.
func (d *localDue) seen() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claiming = time.Time{}
}

// failed keeps the times a failed claim was handed, for the next.
func (d *localDue) failed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = earliest(d.at, d.claiming)
	d.claiming = time.Time{}
}

// earliest returns the earliest armed time not yet seen; zero: none.
func (d *localDue) earliest() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

func (p *Processor) claim(ctx context.Context, max int) (store.ClaimResult, error) {
	// The claim runs under baseCtx, not the work context a stop cancels: a
	// claim cut off mid-flight may still commit, and its tasks would sit
	// leased by nobody until expiry. Tasks claimed as a stop begins start
	// with a cancelled context and are released at once.
	// A database that hangs must not hold the claim loop (and Stop) for
	// longer than a lease.
	claimCtx, cancel := context.WithTimeout(p.baseCtx, p.cfg.LeaseTTL)
	defer cancel()
	sent := time.Now()
	var exclude []uuid.UUID
	if p.cfg.Exclude != nil {
		exclude = p.cfg.Exclude()
	}
	res, err := p.cfg.Store.TaskClaim(claimCtx, &store.TaskClaimParams{
		Namespace: p.cfg.Namespace, Queues: p.cfg.Queues, Types: p.cfg.Types,
		Owner: p.cfg.WorkerID, Max: max, LeaseTTL: p.cfg.LeaseTTL, StrictPriority: p.cfg.StrictPriority,
		Exclude: exclude,
	})
	if err != nil {
		return res, err
	}
	for _, ct := range res.Tasks {
		if ct.Err != nil {
			// Left to lease expiry (a rescuer that can read it reschedules
			// it); the others in the batch run.
			p.cfg.Logger.Error("processor: claimed task has a history this worker cannot read; not running it",
				"task_id", ct.Task.ID, service.ErrAttr(ct.Err))
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
	return res, nil
}

func (p *Processor) inflightCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}

// pollInterval is the wait between claims when nothing wakes the loop: the
// configured interval, or notifier.FallbackPollInterval if shorter while the
// notifier knows notifications are not arriving.
func (p *Processor) pollInterval() time.Duration {
	if n := p.cfg.Notifier; n != nil && !n.Live() {
		return min(p.cfg.PollInterval, notifier.FallbackPollInterval)
	}
	return p.cfg.PollInterval
}
