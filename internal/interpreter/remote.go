package interpreter

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
)

// Remote steps are steps the run hands to workers outside its process
// (what workflow.Remote is made of). A remote step takes a step position
// like any step, and completed it is a step on record (history.State
// folds remote_step_completed into Steps), so a replay returns its
// output without dispatching it again. Not on record, it is dispatched
// (remote_step_dispatched, with its row, through RunParams.DispatchRemote)
// at the run's next point that waits or runs a step, together with the
// others called since; awaiting it ends the run to wait
// ([*RemoteWaitRequest]). Its failure, recorded by its worker, comes back
// on the next run as the step's error, classified and retried by the
// step's retry policy as a Go step's error is; a retry dispatches it
// again as its next attempt.

// DefaultRemoteHeartbeat is a remote step's heartbeat timeout when its
// options set none: its worker's claim is lost when it goes this long
// without a heartbeat.
const DefaultRemoteHeartbeat = 30 * time.Second

// RemoteOptions are a remote step's options as the interpreter and the
// executor use them: workflow.RemoteOpts translated (its fields document
// them).
type RemoteOptions struct {
	Queue            string
	HeartbeatTimeout time.Duration
	StartToClose     time.Duration
	// Step holds the step's retry policy and compensator (its timeouts
	// are the ones above, enforced by the claim's lease).
	Step *StepOptions
}

// RemoteWaitRequest is the error a run ends with when it awaits remote
// steps in flight: the caller records remote_wait_started, which ends the
// attempt; the task is due again when Count of them complete or one
// fails.
type RemoteWaitRequest struct {
	Positions []int
	Count     int
}

func (r *RemoteWaitRequest) Error() string {
	return fmt.Sprintf("awaiting remote steps %v", r.Positions)
}

// RemoteFuture is a remote step called by [Remote]: its position, and its
// outcome once the run knows it.
type RemoteFuture struct {
	Position int
	name     string
	done     bool
	out      json.RawMessage
	err      error
}

// remoteState is the run's dispatches called and not written yet.
type remoteState struct {
	queued []history.RemoteStepDispatchedData
}

// Remote calls the step called name with input at the current position
// of ctx's run, to be done by a worker of opts.Queue, and returns its
// future: resolved when the history has its output (or its unclassified
// failure, which also ends the run as a Go step's failure does), pending
// otherwise (dispatched, or to be).
func Remote(ctx Context, name string, input json.RawMessage, opts RemoteOptions) *RemoteFuture {
	s := ctx.run()
	fail := func(err error) *RemoteFuture { return &RemoteFuture{Position: -1, name: name, done: true, err: err} }
	if err := s.enter("Remote"); err != nil {
		return fail(err)
	}
	if err := s.yield("step"); err != nil {
		return fail(err)
	}
	pos, rec, err := s.claim(name, opts.Step, true)
	if err != nil {
		return fail(err)
	}
	f := &RemoteFuture{Position: pos, name: name}
	if rec != nil {
		f.done, f.out = true, rec.Output
		if history.MaybeSealed(rec.Output) {
			f.err = s.abort(errSealed(fmt.Sprintf("remote step %d (%s)'s recorded output", pos, name)), nil)
		}
		return f
	}
	prev, known := s.remoteAt(pos)
	switch {
	case known && prev.Name != name:
		f.done, f.err = true, s.abort(nondeterministic(pos, prev.Name, name), nil)
		return f
	case known && prev.InFlight():
		return f // dispatched by an earlier attempt
	case known && !prev.Retry && s.p.CollectOnly:
		// Failed, and not classified yet: the next attempt classifies it.
		// A collect-only run (a replay, a compensation) stops here as at
		// any call the history has not decided.
		f.done, f.err = true, s.abort(s.collect(fmt.Sprintf("remote step %d %q failed, to be classified", pos, name), "await"), nil)
		return f
	case known && !prev.Retry:
		// Its worker failed it: the run ends with the step's error, which
		// the step's retry policy classifies.
		info := StepInfo{Position: pos, Name: name}
		s.mu.Lock()
		if s.aborted == nil {
			s.failedOp = opts.Step
			s.abortLocked(remoteError(*prev.Failed), &info)
		}
		f.done, f.err = true, s.aborted
		s.mu.Unlock()
		return f
	}
	if err := opts.Step.validate(); err != nil {
		info := StepInfo{Position: pos, Name: name}
		f.done, f.err = true, s.abort(errors.Wrapf(err, "%s", info), &info)
		return f
	}
	if s.p.Strict {
		if err := s.strictNew(fmt.Sprintf("remote step %d %q", pos, name), "step"); err != nil {
			f.done, f.err = true, s.abort(err, nil)
			return f
		}
	}
	d := history.RemoteStepDispatchedData{
		Position: pos, Name: name, Queue: opts.Queue, Attempt: prev.Attempt + 1, Input: input,
		HeartbeatTimeoutMillis: opts.HeartbeatTimeout.Milliseconds(), StartToCloseMillis: opts.StartToClose.Milliseconds(),
		Compensable: opts.Step != nil && opts.Step.Compensate != nil,
	}
	if d.Queue == "" {
		d.Queue = "default"
	}
	if d.HeartbeatTimeoutMillis <= 0 {
		d.HeartbeatTimeoutMillis = DefaultRemoteHeartbeat.Milliseconds()
	}
	s.mu.Lock()
	s.remote.queued = append(s.remote.queued, d)
	s.mu.Unlock()
	return f
}

// RemoteResult returns the remote step's output, or its error; a step
// not done ends the run to wait for it (see [AwaitRemote]).
func RemoteResult(ctx Context, f *RemoteFuture) (json.RawMessage, error) {
	if !f.done {
		if err := AwaitRemote(ctx, []*RemoteFuture{f}); err != nil {
			return nil, err
		}
	}
	return f.out, f.err
}

// AwaitRemote waits for every remote step of fs not done: the queued
// dispatches are written, and the run ends to wait for all of them at
// once (a [*RemoteWaitRequest] whose Count is theirs), so a fan-in of n
// remote steps wakes the task once rather than up to n times (a failure
// wakes it at once).
func AwaitRemote(ctx Context, fs []*RemoteFuture) error {
	s := ctx.run()
	if err := s.enter("AwaitRemote"); err != nil {
		return err
	}
	if err := s.yield("await"); err != nil {
		return err
	}
	var waiting []int
	for _, f := range fs {
		if !f.done {
			waiting = append(waiting, f.Position)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	if s.p.CollectOnly {
		return s.abort(s.collect(fmt.Sprintf("await remote steps %v", waiting), "await"), nil)
	}
	if err := s.settle(); err != nil {
		return err
	}
	slices.Sort(waiting)
	return s.abort(&RemoteWaitRequest{Positions: waiting, Count: len(waiting)}, nil)
}

// remoteAt returns what the history records of the remote step at pos,
// dispatched and not completed (RunParams.Remote).
func (s *runState) remoteAt(pos int) (history.RemoteStep, bool) {
	return history.RemoteStepAt(s.p.Remote, pos)
}

// dispatchQueued writes the queued dispatches, in position order, in one
// write, serialized with the run's records (recMu).
func (s *runState) dispatchQueued() error {
	s.mu.Lock()
	if len(s.remote.queued) == 0 {
		defer s.mu.Unlock()
		return s.aborted
	}
	s.mu.Unlock()
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	s.mu.Lock()
	batch := s.remote.queued
	s.remote.queued = nil
	if s.aborted != nil || len(batch) == 0 || s.p.CollectOnly {
		defer s.mu.Unlock()
		return s.aborted
	}
	s.mu.Unlock()
	if s.p.DispatchRemote == nil {
		return s.abort(errors.AssertionFailedf("workflow.Remote: the run cannot dispatch remote steps"), nil)
	}
	slices.SortFunc(batch, func(a, b history.RemoteStepDispatchedData) int { return a.Position - b.Position })
	if err := s.p.DispatchRemote(batch); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.abortLocked(recordFailed(batch[0], err), nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// remoteError is the error of a remote step's failure as its worker
// described it: its message, and the marks a Go step's code would set
// (kind, status, attributes, retry-after, a class when the worker
// declared one), so the step's retry policy classifies it as it would a
// Go step's.
func remoteError(info history.ErrorInfo) error {
	err := errors.New(info.Message)
	if info.Kind != "" {
		err = activity.WithKind(err, info.Kind)
	}
	if info.Status != 0 {
		err = activity.WithStatus(err, info.Status)
	}
	if len(info.Attrs) > 0 {
		err = activity.WithAttrs(err, info.Attrs)
	}
	if info.RetryAfterMillis > 0 {
		err = activity.RetryAfter(err, time.Duration(info.RetryAfterMillis)*time.Millisecond)
	}
	switch info.Class {
	case history.Transient:
		err = activity.Transient(err)
	case history.Permanent:
		err = activity.Permanent(err)
	}
	return err
}
