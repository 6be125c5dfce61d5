package store

import (
	"strconv"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// TypeKey names a task type at one version: what a worker can run.
type TypeKey struct {
	Type    string
	Version int
}

func (k TypeKey) String() string { return k.Type + "@" + strconv.Itoa(k.Version) }

// TaskClaimParams describes a claim ([Store.TaskClaim]).
type TaskClaimParams struct {
	Namespace string
	Queues    []string
	Types     []TypeKey // only tasks of these types and versions are claimed
	Owner     string    // the worker id recorded as lease owner
	Max       int       // claim at most this many
	LeaseTTL  time.Duration
	// StrictPriority turns aging off: the claim takes the due tasks in
	// priority order only, and a flood of high-priority work can starve the
	// rest. By default one slot in eight goes to the longest-waiting task.
	StrictPriority bool
	// Exclude are tasks the claim must not take, however due: those a
	// worker found its code cannot replay (sdk.WorkerConfig.DeployCheck's
	// skip policy), left for a worker with compatible code. At most
	// [MaxClaimExclude]; a longer list is refused. Empty (the common
	// case) costs the claim nothing measurable.
	Exclude []uuid.UUID
}

// MaxClaimExclude bounds [TaskClaimParams.Exclude]: 10,000 task ids, a
// claim's parameters staying small (160 KB) and its test against them
// cheap.
const MaxClaimExclude = 10_000

// CheckClaimExclude refuses an Exclude list over [MaxClaimExclude]: what
// both drivers' claims do.
func CheckClaimExclude(p *TaskClaimParams) error {
	if len(p.Exclude) > MaxClaimExclude {
		return errors.Newf("claim: %d tasks excluded, more than the %d a claim takes", len(p.Exclude), MaxClaimExclude)
	}
	return nil
}

// ClaimResult is what [Store.TaskClaim] took, and what it saw of the work it
// could not take, so a claim loop knows when to claim next instead of
// waiting for its poll.
//
// The outlook (HeldBack, NextAt) is read only when the claim took fewer
// than Max tasks; a full claim leaves both zero, as more may be due at
// once.
type ClaimResult struct {
	Tasks []*ClaimedTask
	// HeldBack says due work of the claim's queues and types was left
	// waiting because a queue's concurrency limit had no free slot: a
	// slot freed (a running task of the queue finishing or handing its
	// task back) makes a claim worth trying. The queue was not empty.
	HeldBack bool
	// NextAt is the earliest time more of the claim's work may be claimed,
	// zero when the store knows of none: the next run time of a task not
	// yet due (a delayed start, a retry, a durable timer), or when a
	// rate-limited type whose due work waits has a start token again.
	NextAt time.Time
}

// ClaimedTask is a task a worker now holds under a lease, with its history.
type ClaimedTask struct {
	Task   *Task
	Events []history.Event
	State  history.State // Replay(Events); Status is running
	// Err is set, and Events and State are not, when the task's history
	// could not be decoded or replayed (for instance events written by a
	// newer cairn). One such task does not fail the others of the claim.
	Err error
}

// LeaseRef names a lease a worker believes it holds.
type LeaseRef struct {
	TaskID uuid.UUID
	Epoch  int64
}

// LeaseExtendParams names the leases [Store.LeaseExtendMany] extends.
type LeaseExtendParams struct {
	// Leases are the leases the worker believes it holds; those still held
	// under their epoch are extended.
	Leases []LeaseRef
	// TTL is the new lease's length, from now by the store's clock.
	TTL time.Duration
}

// LeaseRenewal is the reply of [Store.LeaseExtendMany] for one lease still
// held.
type LeaseRenewal struct {
	// CancelRequested says the task's cancel was requested: its attempt
	// should stop at its next checkpoint.
	CancelRequested bool
	// Busy says the lease is still held but was not extended this time:
	// another writer had the task's row locked (PostgreSQL's heartbeat does
	// not wait for row locks). The next heartbeat extends it.
	Busy bool
}

// LeaseExpiryParams selects the expired leases the rescue reads
// ([Store.TaskListLeaseExpired], [Store.TaskLeaseNextExpiry]), by the
// store's clock (PostgreSQL's now(); the embedded store's Clock).
type LeaseExpiryParams struct {
	// Max is how many tasks TaskListLeaseExpired returns at most, oldest
	// expiry first. TaskLeaseNextExpiry ignores it.
	Max int
	// ExpiredFor counts a lease only once it has been expired this long:
	// TaskListLeaseExpired lists the leases that expired before now −
	// ExpiredFor, and TaskLeaseNextExpiry says how long until the next of
	// the others will have. The leader lists at 0; the other processes
	// wait a little longer, so they rescue what a dead or slow leader
	// leaves without racing a live one. Not negative.
	ExpiredFor time.Duration
}

// TaskListStartExpiredParams selects the tasks past their start deadline
// ([Store.TaskListStartExpired]): pending, never started, whose
// start_deadline has passed by the store's clock, in any namespace (the
// runtime's own read), earliest deadline first.
type TaskListStartExpiredParams struct {
	Max int // how many ids at most
}

// LeaderAttemptParams takes or renews a leader lease
// ([Store.LeaderAttempt]): Owner takes the lease of the role Name when it
// is free or has expired, and renews it when Owner holds it.
type LeaderAttemptParams struct {
	Name  string        // the role ("rescuer", "retention", ...)
	Owner string        // the candidate (a process's id)
	TTL   time.Duration // how long the lease lasts from now, by the store's clock
}

// LeaderResignParams gives up a leader lease ([Store.LeaderResign]), if
// Owner holds the one of Name; otherwise it does nothing.
type LeaderResignParams struct {
	Name  string
	Owner string
}
