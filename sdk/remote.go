package sdk

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// Remote steps are steps a workflow hands to workers outside its process
// (workflow.Remote). These client methods are the worker's side of the
// remote step protocol (docs/remote-steps-protocol.md), which the HTTP
// API serves to workers in any language: claim steps of a queue, then
// heartbeat, complete, fail or release each under its claim.

// ErrClaimLost marks a call under a claim that no longer holds its remote
// step: its lease ended and the attempt failed, the task ended or was
// cancelled, or another outcome was recorded. Nothing was recorded.
var ErrClaimLost = engine.ErrClaimLost

// Bounds of the remote step protocol.
const (
	// MaxRemoteClaimWait bounds how long a claim waits for a step: 60s.
	MaxRemoteClaimWait = 60 * time.Second
	// MaxRemoteClaim bounds the steps one claim returns: 100.
	MaxRemoteClaim = store.MaxRemoteClaim
	// MaxRemoteErrorMessage bounds a failure's message: 16 KiB; MaxRemoteErrorAttrs
	// its attributes: 32.
	MaxRemoteErrorMessage = 16 << 10
	MaxRemoteErrorAttrs   = 32
)

// RemoteClaimOpts say what [Client.ClaimRemote] claims.
type RemoteClaimOpts struct {
	// Queue to claim from. Required.
	Queue string
	// Worker names the claimer, recorded with the step's outcome.
	// Required.
	Worker string
	// Names, when set, are the only step names claimed.
	Names []string
	// Max is the most steps claimed: 1 (the default) to MaxRemoteClaim.
	Max int
	// Wait is how long to wait for a step when none is ready: 0 to
	// MaxRemoteClaimWait.
	Wait time.Duration
}

// RemoteClaim is a remote step claimed: what a worker needs to do it,
// and the claim that fences its later calls.
type RemoteClaim struct {
	// Claim is the opaque token of the claim: pass it to HeartbeatRemote,
	// CompleteRemote, FailRemote and ReleaseRemote.
	Claim     string
	TaskID    uuid.UUID
	Namespace string
	Position  int
	Name      string
	Attempt   int
	// Input is the step's input, decoded.
	Input json.RawMessage
	// DispatchedAt is when the workflow dispatched the step (or a worker
	// handed it back), by the store's clock.
	DispatchedAt     time.Time
	LeaseExpiresAt   time.Time
	HeartbeatTimeout time.Duration
	StartToClose     time.Duration // 0: no bound
}

// RemoteFailure is a remote step's failure as its worker reports it:
// what a Go step's error carries in its marks, so the step's retry
// policy classifies it the same way.
type RemoteFailure struct {
	Message string
	// Type is the error's type in the worker's language (ValueError);
	// recorded as the attribute "type".
	Type string
	// Class is "transient", "permanent" or "" (the retry policy decides).
	Class      string
	Kind       string
	Status     int
	Attributes map[string]string
	RetryAfter time.Duration
}

// ClaimRemote claims up to opts.Max remote steps of opts.Queue in the
// client's namespace, each under a lease of its heartbeat timeout,
// waiting up to opts.Wait for one when none is ready (woken by the
// dispatch; polling as the fallback). An empty result is not an error.
func (c *Client) ClaimRemote(ctx context.Context, opts RemoteClaimOpts) ([]RemoteClaim, error) {
	p := &store.RemoteStepClaimParams{Namespace: c.namespace, Queue: opts.Queue, Names: opts.Names, Max: max(opts.Max, 1), Worker: opts.Worker}
	if err := p.Validate(); err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	if opts.Wait < 0 || opts.Wait > MaxRemoteClaimWait {
		return nil, errmark.Mark(errors.Newf("claim remote steps: wait %s is outside 0..%s", opts.Wait, MaxRemoteClaimWait), ErrInvalid)
	}
	var woken <-chan struct{}
	if n := c.waitListener(); n != nil && opts.Wait > 0 {
		ch, stop := n.WaitRemote(store.RemoteQueueKey(c.namespace, opts.Queue))
		defer stop()
		woken = ch
	}
	deadline := time.NewTimer(opts.Wait)
	defer deadline.Stop()
	for {
		steps, err := c.store.ClaimRemote(ctx, p)
		if err != nil {
			return nil, err
		}
		if len(steps) > 0 || opts.Wait == 0 {
			return remoteClaims(steps), nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-deadline.C:
			return nil, nil
		case <-woken:
		case <-time.After(remoteClaimPoll):
		}
	}
}

// remoteClaimPoll is how often a waiting claim looks again without a
// wake-up: what keeps it correct when notifications are lost.
const remoteClaimPoll = time.Second

func remoteClaims(steps []*store.RemoteStep) []RemoteClaim {
	out := make([]RemoteClaim, len(steps))
	for i, r := range steps {
		out[i] = RemoteClaim{
			Claim: claimToken(r.TaskID, r.Position, r.Nonce), TaskID: r.TaskID, Namespace: r.Namespace, Position: r.Position,
			Name: r.Name, Attempt: r.Attempt, Input: r.Input, DispatchedAt: r.DispatchedAt, LeaseExpiresAt: r.LeaseExpiresAt,
			HeartbeatTimeout: r.HeartbeatTimeout, StartToClose: r.StartToClose,
		}
	}
	return out
}

// claimToken is a claim's token: the task, the step's position and the
// claim's nonce.
func claimToken(task uuid.UUID, pos int, nonce string) string {
	return task.String() + "." + strconv.Itoa(pos) + "." + nonce
}

// RemoteCallOpts are the options of a call under a claim; nil takes
// every default.
type RemoteCallOpts struct {
	// Queues, when set, are the only queues the call may act in (a
	// worker token's): a claim of another queue's step is refused as
	// lost.
	Queues []string
	// Ran is how long the step ran, recorded with its outcome.
	Ran time.Duration
}

// ref is the reference of claim under opts.
func (c *Client) ref(claim string, opts *RemoteCallOpts) (store.RemoteStepRef, time.Duration, error) {
	ref, err := c.parseClaim(claim)
	if err != nil || opts == nil {
		return ref, 0, err
	}
	ref.Queues = opts.Queues
	if opts.Ran < 0 {
		return ref, 0, errmark.Mark(errors.Newf("a step's run time %s is negative", opts.Ran), ErrInvalid)
	}
	return ref, opts.Ran, nil
}

// parseClaim reads a claim's token in the client's namespace.
func (c *Client) parseClaim(claim string) (store.RemoteStepRef, error) {
	parts := strings.Split(claim, ".")
	bad := errmark.Mark(errors.Newf("claim %q is not a remote step's claim", truncateText(claim, 120)), ErrInvalid)
	if len(parts) != 3 || parts[2] == "" || len(parts[2]) > 64 {
		return store.RemoteStepRef{}, bad
	}
	task, err := uuid.Parse(parts[0])
	if err != nil {
		return store.RemoteStepRef{}, bad
	}
	pos, err := strconv.Atoi(parts[1])
	if err != nil || pos < 0 {
		return store.RemoteStepRef{}, bad
	}
	return store.RemoteStepRef{Namespace: c.namespace, TaskID: task, Position: pos, Nonce: parts[2]}, nil
}

// RemoteRenewal is what a heartbeat learns: the lease's new end, and
// whether the task's cancel was requested (the worker should stop, and
// fail the step).
type RemoteRenewal = store.RemoteRenewal

// HeartbeatRemote extends the lease of the remote step claim holds. A
// claim that no longer holds it is refused with [ErrClaimLost].
func (c *Client) HeartbeatRemote(ctx context.Context, claim string, opts *RemoteCallOpts) (RemoteRenewal, error) {
	ref, _, err := c.ref(claim, opts)
	if err != nil {
		return RemoteRenewal{}, err
	}
	r, err := c.store.Engine().RemoteStepHeartbeat(ctx, &ref)
	if errors.Is(err, store.ErrNotFound) {
		return r, errors.Wrap(ErrClaimLost, "heartbeat")
	}
	return r, err
}

// CompleteRemote records the output of the remote step claim holds
// (remote_step_completed), which wakes a workflow awaiting it. Completing
// again under the same claim records nothing and is not an error; under
// a claim that no longer holds the step it is refused with
// [ErrClaimLost]. The output must be JSON, within the client's payload
// bound.
func (c *Client) CompleteRemote(ctx context.Context, claim string, output json.RawMessage, opts *RemoteCallOpts) error {
	ref, ran, err := c.ref(claim, opts)
	if err != nil {
		return err
	}
	if len(output) == 0 {
		output = json.RawMessage("null")
	}
	if !json.Valid(output) {
		return errmark.Mark(errors.New("complete remote step: the output is not valid JSON"), ErrInvalid)
	}
	if err := jsoncheck.Check(output, "output"); err != nil {
		return errmark.Mark(err, ErrInvalid)
	}
	if err := checkPayloadSize("the remote step's output", output, c.maxPayload); err != nil {
		return err
	}
	return c.store.SettleRemote(ctx, engine.RemoteOutcome{Ref: ref, Output: output, Duration: ran})
}

// FailRemote records the failure of the remote step claim holds
// (remote_step_failed): the workflow's next attempt classifies it with
// the step's retry policy and tries the step again or fails it. Failing
// again under the same claim records nothing and is not an error; under
// a claim that no longer holds the step it is refused with
// [ErrClaimLost].
func (c *Client) FailRemote(ctx context.Context, claim string, f RemoteFailure, opts *RemoteCallOpts) error {
	ref, ran, err := c.ref(claim, opts)
	if err != nil {
		return err
	}
	info, err := f.errorInfo()
	if err != nil {
		return errmark.Mark(err, ErrInvalid)
	}
	return c.store.SettleRemote(ctx, engine.RemoteOutcome{Ref: ref, Failure: &info, Duration: ran})
}

// ReleaseRemote hands the remote step claim holds back to its queue
// without an outcome (a worker stopping): claimable again at once, under
// the same attempt.
func (c *Client) ReleaseRemote(ctx context.Context, claim string, opts *RemoteCallOpts) error {
	ref, _, err := c.ref(claim, opts)
	if err != nil {
		return err
	}
	err = engine.ReleaseRemote(ctx, c.store.Engine(), ref)
	if errors.Is(err, store.ErrNotFound) {
		return errors.Wrap(ErrClaimLost, "release")
	}
	return err
}

// RemoteChunk is a chunk a remote step's worker writes to one of its
// task's streams ([Client.StreamRemote]): Data is JSON, at most
// activities.MaxStreamChunkBytes.
type RemoteChunk struct {
	Stream string
	Data   json.RawMessage
}

// StreamRemote writes chunks, in order, to the task's streams under the
// claim of its remote step, as a Go step writes through
// activities.Stream: readers see them at the step's position and attempt
// as they come, and the step's outcome closes its streams (ended when it
// completes, with their record in its history; rewound when it fails,
// its lease ends or it is released). It returns the seq of the last
// chunk. A claim that no longer holds the step is refused with
// [ErrClaimLost] (so are chunks of a task that has finished); chunks that
// would take the claim past store.MaxRemoteStreamBytes (32 MiB) or 64
// streams with [ErrPayloadTooLarge], nothing of them written.
func (c *Client) StreamRemote(ctx context.Context, claim string, chunks []RemoteChunk, opts *RemoteCallOpts) (int64, error) {
	ref, _, err := c.ref(claim, opts)
	if err != nil {
		return 0, err
	}
	stored, bytes, err := checkRemoteChunks(chunks)
	if err != nil {
		return 0, err
	}
	seq, err := c.store.StreamRemote(ctx, ref, stored, bytes)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, errors.Wrap(ErrClaimLost, "stream")
	case errors.Is(err, store.ErrStreamFull):
		return 0, errmark.Mark(err, ErrPayloadTooLarge)
	}
	return seq, err
}

// checkRemoteChunks returns chunks as the store takes them, and their
// JSON's size, or why they cannot be written.
func checkRemoteChunks(chunks []RemoteChunk) ([]store.RemoteChunk, int64, error) {
	if len(chunks) == 0 || len(chunks) > store.MaxStreamAppend {
		return nil, 0, errmark.Mark(errors.Newf("stream: %d chunks, expected 1 to %d", len(chunks), store.MaxStreamAppend), ErrInvalid)
	}
	out := make([]store.RemoteChunk, len(chunks))
	var bytes int64
	for i, ch := range chunks {
		if err := history.ValidStreamName(ch.Stream); err != nil {
			return nil, 0, errmark.Mark(errors.Wrapf(err, "stream: chunk %d", i), ErrInvalid)
		}
		if len(ch.Data) > activities.MaxStreamChunkBytes {
			return nil, 0, errmark.Mark(errors.Newf("stream %q: chunk %d of %d bytes is over the limit of %d",
				ch.Stream, i, len(ch.Data), activities.MaxStreamChunkBytes), ErrPayloadTooLarge)
		}
		if len(ch.Data) == 0 || !json.Valid(ch.Data) {
			return nil, 0, errmark.Mark(errors.Newf("stream %q: chunk %d is not valid JSON", ch.Stream, i), ErrInvalid)
		}
		if err := jsoncheck.Check(ch.Data, "a stream chunk"); err != nil {
			return nil, 0, errmark.Mark(err, ErrInvalid)
		}
		out[i] = store.RemoteChunk{Stream: ch.Stream, Data: ch.Data}
		bytes += int64(len(ch.Data))
	}
	return out, bytes, nil
}

// errorInfo is f as the history records it, checked.
func (f RemoteFailure) errorInfo() (history.ErrorInfo, error) {
	info := history.ErrorInfo{Message: f.Message, Kind: f.Kind, Status: f.Status, RetryAfterMillis: f.RetryAfter.Milliseconds()}
	switch {
	case f.Message == "":
		return info, errors.New("a failure needs a message")
	case len(f.Message) > MaxRemoteErrorMessage:
		return info, errors.Newf("a failure's message of %d bytes is over the bound of %d", len(f.Message), MaxRemoteErrorMessage)
	case len(f.Kind) > 200 || len(f.Type) > 200:
		return info, errors.New("a failure's kind and type are at most 200 bytes")
	case f.Status < 0 || f.Status > 999:
		return info, errors.Newf("a failure's status %d is outside 0..999", f.Status)
	case f.RetryAfter < 0 || f.RetryAfter > 24*time.Hour:
		return info, errors.Newf("a failure's retry-after %s is outside 0..24h", f.RetryAfter)
	case len(f.Attributes) > MaxRemoteErrorAttrs:
		return info, errors.Newf("a failure has %d attributes, over the bound of %d", len(f.Attributes), MaxRemoteErrorAttrs)
	}
	switch history.Class(f.Class) {
	case "", history.Transient, history.Permanent:
		info.Class = history.Class(f.Class)
	default:
		return info, errors.Newf("a failure's class %q is not transient, permanent or empty", f.Class)
	}
	for k, v := range f.Attributes {
		if k == "" || len(k) > 200 || len(v) > 1024 {
			return info, errors.New("a failure's attribute names are 1 to 200 bytes, values at most 1024")
		}
	}
	if len(f.Attributes) > 0 || f.Type != "" {
		info.Attrs = make(map[string]string, len(f.Attributes)+1)
		for k, v := range f.Attributes {
			info.Attrs[k] = v
		}
		if _, set := info.Attrs["type"]; f.Type != "" && !set {
			info.Attrs["type"] = f.Type
		}
	}
	for _, s := range []string{info.Message, info.Kind} {
		if strings.ContainsRune(s, 0) {
			return info, errors.New("a failure's text holds the character U+0000")
		}
	}
	return info, nil
}
