package store

import (
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// A remote step is a step a workflow hands to workers outside its process
// (workflow.Remote): its row in remote_steps is what those workers claim
// by queue, beside the task's history, which records the step's dispatch
// and outcome (history.RemoteStepDispatchedData and the rest). The row
// is written with the dispatch, in the same transaction
// ([Executor.RemoteStepInsert] with the parent's fenced append), claimed
// under a lease whose nonce fences every later call
// ([Executor.RemoteStepClaim], [Executor.RemoteStepHeartbeat]), and
// removed with the outcome's append ([Executor.RemoteStepTake]); a claim
// whose lease expired is listed for the rescuer
// ([Executor.RemoteStepListExpired]), which fails the attempt. A dispatch
// announces its queue ([Notification.Remote]).

// Bounds of a remote step's fields, checked by every store.
const (
	// MaxRemoteNameBytes bounds a remote step's name, queue and a
	// claiming worker's name: 200 bytes.
	MaxRemoteNameBytes = 200
	// MaxRemoteClaim bounds the steps one claim returns: 100.
	MaxRemoteClaim = 100
	// MaxRemoteNames bounds the step names one claim names: 100.
	MaxRemoteNames = 100
	// MinRemoteHeartbeat and MaxRemoteHeartbeat bound a step's heartbeat
	// timeout, its claim's lease: 1s to 1h.
	MinRemoteHeartbeat = time.Second
	MaxRemoteHeartbeat = time.Hour
	// MaxRemoteInputBytes bounds a remote step's input as stored,
	// encoded: 4 MiB (the input is in the history too).
	MaxRemoteInputBytes = 4 << 20
)

// RemoteStep is a remote step's row.
type RemoteStep struct {
	Namespace string
	TaskID    uuid.UUID
	Position  int
	Name      string
	Queue     string
	Attempt   int
	// Input is the step's input as the SDK's payload stage encoded it.
	Input            []byte
	HeartbeatTimeout time.Duration
	StartToClose     time.Duration // 0: no bound
	DispatchedAt     time.Time
	// Nonce fences the claim that holds the step ("" while none does);
	// Worker, ClaimedAt and LeaseExpiresAt describe it.
	Nonce          string
	Worker         string
	ClaimedAt      time.Time
	LeaseExpiresAt time.Time
	// CancelRequested is the task's, read with a claim or a heartbeat.
	CancelRequested bool
}

// RemoteStepInsertParams write the rows of remote steps just dispatched
// ([Executor.RemoteStepInsert]), claimable at once; their queues are
// announced when the write commits.
type RemoteStepInsertParams struct {
	Steps []RemoteStep
}

// Validate checks the parameters: what every store does first.
func (p *RemoteStepInsertParams) Validate() error {
	if p == nil || len(p.Steps) == 0 {
		return errors.New("insert remote steps: none given")
	}
	for _, r := range p.Steps {
		switch {
		case r.Namespace == "" || r.TaskID == uuid.Nil:
			return errors.New("insert remote steps: namespace and task are required")
		case r.Position < 0 || r.Attempt < 1:
			return errors.Newf("insert remote steps: position %d, attempt %d", r.Position, r.Attempt)
		case !validRemoteName(r.Name) || !validRemoteName(r.Queue):
			return errors.Newf("insert remote steps: a step's name and queue are 1 to %d bytes of UTF-8 without NUL", MaxRemoteNameBytes)
		case r.HeartbeatTimeout < MinRemoteHeartbeat || r.HeartbeatTimeout > MaxRemoteHeartbeat:
			return errors.Newf("insert remote steps: heartbeat timeout %s is outside %s..%s", r.HeartbeatTimeout, MinRemoteHeartbeat, MaxRemoteHeartbeat)
		case r.StartToClose < 0:
			return errors.Newf("insert remote steps: start-to-close %s is negative", r.StartToClose)
		case len(r.Input) > MaxRemoteInputBytes:
			return errors.Newf("insert remote steps: an input of %d bytes is over the bound of %d", len(r.Input), MaxRemoteInputBytes)
		}
	}
	return nil
}

// RemoteStepClaimParams claim up to Max remote steps of a namespace's
// queue for Worker ([Executor.RemoteStepClaim]): those not claimed (a
// claim whose lease ended is the rescuer's), of tasks not finished and
// not cancelled, oldest dispatch first, skipping rows another claim
// locks.
// Each claimed step gets a new nonce and a lease of its heartbeat
// timeout, by the store's clock.
type RemoteStepClaimParams struct {
	Namespace string
	Queue     string
	// Names, when not empty, are the only step names claimed.
	Names  []string
	Max    int
	Worker string
}

// Validate checks the parameters: what every store does first.
func (p *RemoteStepClaimParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("claim remote steps: a namespace is required")
	case !validRemoteName(p.Queue) || !validRemoteName(p.Worker):
		return errors.Newf("claim remote steps: a queue and a worker are 1 to %d bytes of UTF-8 without NUL", MaxRemoteNameBytes)
	case p.Max < 1 || p.Max > MaxRemoteClaim:
		return errors.Newf("claim remote steps: max %d is outside 1..%d", p.Max, MaxRemoteClaim)
	case len(p.Names) > MaxRemoteNames:
		return errors.Newf("claim remote steps: %d names, over the bound of %d", len(p.Names), MaxRemoteNames)
	case slices.ContainsFunc(p.Names, func(n string) bool { return !validRemoteName(n) }):
		return errors.Newf("claim remote steps: a step name is 1 to %d bytes of UTF-8 without NUL", MaxRemoteNameBytes)
	}
	return nil
}

// RemoteStepRef names a remote step held by a claim: the task, the
// step's position and the claim's nonce.
type RemoteStepRef struct {
	Namespace string
	TaskID    uuid.UUID
	Position  int
	Nonce     string
	// Expired makes RemoteStepTake take the step only if its lease has
	// ended by the store's clock: the rescuer's take, which a heartbeat
	// that came first wins.
	Expired bool
	// Queues, when set, are the only queues whose steps the reference
	// may name (a worker token's): a step of another is not found.
	Queues []string
}

// Validate checks the reference: what every store does first.
func (r *RemoteStepRef) Validate() error {
	if r == nil || r.Namespace == "" || r.TaskID == uuid.Nil || r.Position < 0 || r.Nonce == "" || len(r.Nonce) > MaxRemoteNameBytes {
		return errors.New("remote step: namespace, task, position and claim nonce are required")
	}
	if len(r.Queues) > MaxRemoteNames || slices.ContainsFunc(r.Queues, func(q string) bool { return !validRemoteName(q) }) {
		return errors.Newf("remote step: at most %d queues, each 1 to %d bytes of UTF-8 without NUL", MaxRemoteNames, MaxRemoteNameBytes)
	}
	return nil
}

// RemoteQueueKey is how a notification names a namespace's queue.
func RemoteQueueKey(namespace, queue string) string { return namespace + "/" + queue }

// RemoteRenewal is what a heartbeat learns: the lease's new end and
// whether the task's cancel was requested.
type RemoteRenewal struct {
	LeaseExpiresAt  time.Time
	CancelRequested bool
}

// RemoteStepExpiredParams list up to Max claimed remote steps whose lease
// ended, by the store's clock ([Executor.RemoteStepListExpired]), and the
// rows of tasks that finished, whose steps nobody will collect.
type RemoteStepExpiredParams struct {
	Max int
}

// Validate checks the parameters: what every store does first.
func (p *RemoteStepExpiredParams) Validate() error {
	if p == nil || p.Max < 1 || p.Max > 10_000 {
		return errors.New("list expired remote steps: max is 1..10000")
	}
	return nil
}

// SortRemoteSteps puts claimed steps in their claim's order, oldest
// dispatch first: a driver's RETURNING does not keep it.
func SortRemoteSteps(rs []*RemoteStep) {
	slices.SortFunc(rs, func(a, b *RemoteStep) int {
		if c := a.DispatchedAt.Compare(b.DispatchedAt); c != 0 {
			return c
		}
		if c := slices.Compare(a.TaskID[:], b.TaskID[:]); c != 0 {
			return c
		}
		return a.Position - b.Position
	})
}

func validRemoteName(s string) bool { return s != "" && len(s) <= MaxRemoteNameBytes && validText(s) }

// A remote step's worker may write stream chunks under its claim
// ([Executor.RemoteStreamAppend]), at the step's position and under its
// attempt, as a Go step writes through activities.Stream: readers see
// them as they come. Its outcome closes them in the transaction that
// takes the claim ([Executor.RemoteStreamClose]: ended when it completed,
// rewound otherwise), as does a release (rewound: the next claim writes
// anew).

// MaxRemoteStreamBytes bounds the chunks one claim of a remote step
// writes, over all its streams (at most history.MaxStreams of them), as
// their writer measured them (their JSON): 32 MiB, a Go step's bound for
// one stream.
const MaxRemoteStreamBytes = 32 << 20

// ErrStreamFull marks a remote step's chunks refused because they would
// take its claim past [MaxRemoteStreamBytes] or history.MaxStreams
// streams: nothing of them is written.
var ErrStreamFull = errors.New("the claim's stream chunks are over their limit")

// RemoteStreamAppendParams are chunks [Executor.RemoteStreamAppend]
// writes to a task's streams under the claim Ref, in order.
type RemoteStreamAppendParams struct {
	Ref    RemoteStepRef
	Chunks []RemoteChunk
	// Bytes is what the chunks add to the claim's total, bounded by
	// [MaxRemoteStreamBytes]: their JSON's size before the payload stage
	// encoded them.
	Bytes int64
}

// RemoteChunk is one chunk of a remote step's stream: Data as the
// payload stage encoded it.
type RemoteChunk struct {
	Stream string
	Data   []byte
}

// Validate checks the parameters: what every store does first.
func (p *RemoteStreamAppendParams) Validate() error {
	if err := p.Ref.Validate(); err != nil {
		return err
	}
	switch {
	case p.Ref.Expired:
		return errors.New("append to a remote step's streams: an expired take is not a claim")
	case len(p.Chunks) == 0 || len(p.Chunks) > MaxStreamAppend:
		return errors.Newf("append to a remote step's streams: %d chunks, expected 1 to %d", len(p.Chunks), MaxStreamAppend)
	case p.Bytes < 0:
		return errors.Newf("append to a remote step's streams: %d bytes", p.Bytes)
	}
	return nil
}

// RemoteStreamCloseParams name the streams [Executor.RemoteStreamClose]
// closes: those the remote step at Position left open (its current
// attempt's: an outcome closes its attempt's streams as it is recorded).
type RemoteStreamCloseParams struct {
	Namespace string
	TaskID    uuid.UUID
	Position  int
	// Kind is StreamEnd (the step completed: its chunks stand) or
	// StreamRewind (it failed, its lease ended or its claim let it go).
	Kind StreamKind
}

// Validate checks the parameters: what every store does first.
func (p *RemoteStreamCloseParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "" || p.TaskID == uuid.Nil:
		return errors.New("close a remote step's streams: namespace and task are required")
	case p.Position < 0:
		return errors.Newf("close a remote step's streams: position %d", p.Position)
	case p.Kind != StreamEnd && p.Kind != StreamRewind:
		return errors.Newf("close a remote step's streams: kind %q is neither %q nor %q", p.Kind, StreamEnd, StreamRewind)
	}
	return nil
}
