package history

import (
	"encoding/json"
	"slices"
)

// Remote steps are steps a workflow hands to workers outside its own
// process (workflow.Remote): a worker in any language claims them by
// queue over the remote step protocol. They take step positions like any
// step, and a remote step that completes joins the task's steps
// (Steps, or Ahead) as a step_completed would, so a replay returns its
// output. What differs is where it runs: the workflow's attempt records
// remote_step_dispatched and ends to wait (remote_wait_started), holding
// no worker slot; the outcome is appended by whoever answers the claim
// (remote_step_completed, remote_step_failed), at any time, and wakes the
// task. A failure is classified by the workflow's own code, on its next
// attempt, exactly as a Go step's error is (the same retry policy and
// CEL classifier), and a retry dispatches the step again as its next
// attempt.

// RemoteStepDispatchedData is the payload of remote_step_dispatched: the
// workflow handed the step at Position, called Name, to the workers of
// Queue, with Input, as the step's Attempt-th attempt (from 1). A worker
// holds its claim for HeartbeatTimeoutMillis between heartbeats; a run
// of it may last StartToCloseMillis (0: no bound). Compensable says the
// workflow gave it a compensator, which runs in the workflow's worker
// with the recorded output.
type RemoteStepDispatchedData struct {
	Position               int             `json:"position"`
	Name                   string          `json:"name"`
	Queue                  string          `json:"queue"`
	Attempt                int             `json:"attempt"`
	Input                  json.RawMessage `json:"input,omitempty"`
	HeartbeatTimeoutMillis int64           `json:"heartbeat_timeout_ms"`
	StartToCloseMillis     int64           `json:"start_to_close_ms,omitempty"`
	Compensable            bool            `json:"compensable,omitempty"`
}

// RemoteStepCompletedData is the payload of remote_step_completed: the
// remote step at Position completed its Attempt-th attempt with Output,
// done by Worker under claim Claim (the claim's fencing nonce, so a
// repeated completion under the same claim is recognized). It joins the
// task's steps; a task awaiting it is woken.
type RemoteStepCompletedData struct {
	Position       int             `json:"position"`
	Name           string          `json:"name"`
	Attempt        int             `json:"attempt"`
	Worker         string          `json:"worker"`
	Claim          string          `json:"claim"`
	Output         json.RawMessage `json:"output,omitempty"`
	DurationMillis int64           `json:"duration_ms,omitempty"`
	// Streams record the streams the worker wrote under the claim, ended
	// with the step (outcome completed), as a Go step's stream_closed.
	Streams []StreamClosedData `json:"streams,omitempty"`
}

// RemoteStepFailedData is the payload of remote_step_failed: the remote
// step at Position failed its Attempt-th attempt, done by Worker under
// claim Claim (empty: never claimed), with Error as the worker described
// it. Its Class is what the worker declared (empty: undecided); the
// workflow's next attempt classifies it with the step's retry policy,
// as a Go step's error, and records the decision (attempt_failed). A
// claim whose lease expired fails with kind heartbeat_timeout. A task
// awaiting the step is woken at once.
type RemoteStepFailedData struct {
	Position       int       `json:"position"`
	Name           string    `json:"name"`
	Attempt        int       `json:"attempt"`
	Worker         string    `json:"worker,omitempty"`
	Claim          string    `json:"claim,omitempty"`
	Error          ErrorInfo `json:"error"`
	DurationMillis int64     `json:"duration_ms,omitempty"`
	// Streams record the streams the worker wrote under the claim,
	// rewound with the failure (outcome rewound). A claim whose lease
	// ended has its streams rewound without a record, as a lost attempt's.
	Streams []StreamClosedData `json:"streams,omitempty"`
}

// RemoteWaitStartedData is the payload of remote_wait_started: the
// workflow awaits its remote steps at Positions, all in flight, until
// Count of them (0 means 1) have completed or any has failed. Like
// child_wait_started it ends the attempt: no worker slot is held while
// the steps run elsewhere.
type RemoteWaitStartedData struct {
	Positions []int `json:"positions"`
	Count     int   `json:"count,omitempty"`
}

// EventType implements [Payload].
func (RemoteStepDispatchedData) EventType() Type { return RemoteStepDispatched }

// EventType implements [Payload].
func (RemoteStepCompletedData) EventType() Type { return RemoteStepCompleted }

// EventType implements [Payload].
func (RemoteStepFailedData) EventType() Type { return RemoteStepFailed }

// EventType implements [Payload].
func (RemoteWaitStartedData) EventType() Type { return RemoteWaitStarted }

// RemoteStep is a remote step dispatched and not completed, as the
// history records it: in flight (Failed nil), failed and not yet
// classified (Failed set), or to be dispatched again (Retry: its
// failure was classified transient, or the task was requeued).
type RemoteStep struct {
	Position    int
	Name        string
	Queue       string
	Attempt     int
	Compensable bool
	Failed      *ErrorInfo
	Retry       bool
}

// InFlight reports whether the step's latest attempt awaits its outcome.
func (r RemoteStep) InFlight() bool { return r.Failed == nil && !r.Retry }

// RemoteWait is a wait for Count of the remote steps at Positions to
// complete (or any to fail); Completed counts those that have.
type RemoteWait struct {
	Positions []int
	Count     int
	Completed int
}

// RemoteAt returns the remote step dispatched at pos and not completed.
func (s State) RemoteAt(pos int) (RemoteStep, bool) { return RemoteStepAt(s.Remote, pos) }

// RemoteStepAt returns the remote step at pos among rs, ordered by
// position as [State.Remote] is.
func RemoteStepAt(rs []RemoteStep, pos int) (RemoteStep, bool) {
	i, ok := slices.BinarySearchFunc(rs, pos, func(r RemoteStep, pos int) int { return r.Position - pos })
	if !ok {
		return RemoteStep{}, false
	}
	return rs[i], true
}

func (s *State) applyRemoteDispatched(e Event, p RemoteStepDispatchedData, owned bool) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	prev, again := s.RemoteAt(p.Position)
	switch {
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, RemoteStepDispatched)
	case p.Name == "":
		return invalidf(nil, "event %d (%s): no step name", e.Seq, RemoteStepDispatched)
	case p.Queue == "":
		return invalidf(nil, "event %d (%s): no queue", e.Seq, RemoteStepDispatched)
	case p.HeartbeatTimeoutMillis <= 0 || p.StartToCloseMillis < 0:
		return invalidf(nil, "event %d (%s): heartbeat timeout %d ms, start-to-close %d ms", e.Seq, RemoteStepDispatched, p.HeartbeatTimeoutMillis, p.StartToCloseMillis)
	case p.Position < len(s.Steps):
		return invalidf(nil, "event %d (%s): position %d is on record", e.Seq, RemoteStepDispatched, p.Position)
	}
	if _, done := s.StepAt(p.Position); done {
		return invalidf(nil, "event %d (%s): position %d is on record", e.Seq, RemoteStepDispatched, p.Position)
	}
	switch {
	case again && !prev.Retry:
		return invalidf(nil, "event %d (%s): remote step %d's attempt %d is not to be retried", e.Seq, RemoteStepDispatched, p.Position, prev.Attempt)
	case again && (p.Attempt != prev.Attempt+1 || p.Name != prev.Name):
		return invalidf(nil, "event %d (%s): attempt %d of %q after attempt %d of %q", e.Seq, RemoteStepDispatched, p.Attempt, p.Name, prev.Attempt, prev.Name)
	case !again && p.Attempt != 1:
		return invalidf(nil, "event %d (%s): first dispatch as attempt %d", e.Seq, RemoteStepDispatched, p.Attempt)
	}
	s.setRemote(RemoteStep{Position: p.Position, Name: p.Name, Queue: p.Queue, Attempt: p.Attempt, Compensable: p.Compensable}, owned)
	return nil
}

// requireInFlight checks that an outcome of the remote step at pos
// belongs to its latest attempt, in flight, of a task not finished.
func (s *State) requireInFlight(e Event, pos int, name string, attempt int) (RemoteStep, error) {
	r, ok := s.RemoteAt(pos)
	switch {
	case s.Compensation.IsStarted():
		return r, invalidf(nil, "event %d (%s): task is compensating", e.Seq, e.Data.EventType())
	case !ok:
		return r, invalidf(nil, "event %d (%s): no remote step in flight at position %d", e.Seq, e.Data.EventType(), pos)
	case !r.InFlight():
		return r, invalidf(nil, "event %d (%s): remote step %d's attempt %d has its outcome", e.Seq, e.Data.EventType(), pos, r.Attempt)
	case r.Attempt != attempt || r.Name != name:
		return r, invalidf(nil, "event %d (%s): attempt %d of %q, in flight is attempt %d of %q", e.Seq, e.Data.EventType(), attempt, name, r.Attempt, r.Name)
	}
	return r, nil
}

func (s *State) applyRemoteCompleted(e Event, p RemoteStepCompletedData, owned bool) error {
	r, err := s.requireInFlight(e, p.Position, p.Name, p.Attempt)
	if err != nil {
		return err
	}
	if p.Worker == "" || p.Claim == "" {
		return invalidf(nil, "event %d (%s): no worker or claim", e.Seq, RemoteStepCompleted)
	}
	if err := checkRemoteStreams(e, p.Position, p.Streams, StreamCompleted); err != nil {
		return err
	}
	s.dropRemote(p.Position, owned)
	s.recordStep(e, Step{Position: p.Position, Name: p.Name, Output: p.Output, Compensable: r.Compensable}, owned)
	if w := s.RemoteWait; w != nil && slices.Contains(w.Positions, p.Position) {
		wait := *w
		wait.Completed++
		s.RemoteWait = &wait
		if wait.Completed >= wait.Count {
			s.wakeFromRemote(e)
		}
	}
	return nil
}

func (s *State) applyRemoteFailed(e Event, p RemoteStepFailedData, owned bool) error {
	r, err := s.requireInFlight(e, p.Position, p.Name, p.Attempt)
	if err != nil {
		return err
	}
	if p.Error.Message == "" {
		return invalidf(nil, "event %d (%s): no error message", e.Seq, RemoteStepFailed)
	}
	if err := checkRemoteStreams(e, p.Position, p.Streams, StreamRewound); err != nil {
		return err
	}
	info := p.Error
	r.Failed = &info
	s.setRemote(r, owned)
	if w := s.RemoteWait; w != nil && slices.Contains(w.Positions, p.Position) {
		// The workflow decides at once whether it is tried again.
		s.wakeFromRemote(e)
	}
	return nil
}

func (s *State) applyRemoteWaitStarted(e Event, p RemoteWaitStartedData) error {
	if err := s.checkWaitStart(e, "remote step", "remote steps", p.Positions, p.Count); err != nil {
		return err
	}
	for _, pos := range p.Positions {
		if r, ok := s.RemoteAt(pos); !ok || !r.InFlight() {
			return invalidf(nil, "event %d (%s): no remote step in flight at position %d", e.Seq, RemoteWaitStarted, pos)
		}
	}
	// As child_wait_started: the attempt ends without failing.
	s.RemoteWait = &RemoteWait{Positions: slices.Clone(p.Positions), Count: max(p.Count, 1)}
	s.parkForWait(e)
	return nil
}

// wakeFromRemote ends the task's remote wait: due at once. The status
// stays what it was (pending: the wait ended the attempt).
func (s *State) wakeFromRemote(e Event) {
	s.RemoteWait = nil
	if s.Status == StatusPending && e.At.Before(s.RunAt) {
		s.RunAt = e.At
	}
}

// setRemote records r at its position: in place when owned (replay's own
// state, so a fan-out of n remote steps replays in O(n log n)), else copy
// on write (a State derived from s may share the slice).
func (s *State) setRemote(r RemoteStep, owned bool) {
	remote := s.Remote
	if !owned {
		remote = slices.Clone(remote)
	}
	i, found := slices.BinarySearchFunc(remote, r.Position, func(x RemoteStep, pos int) int { return x.Position - pos })
	if found {
		remote[i] = r
	} else {
		remote = slices.Insert(remote, i, r)
	}
	s.Remote = remote
}

func (s *State) dropRemote(pos int, owned bool) {
	remote := s.Remote
	if !owned {
		remote = slices.Clone(remote)
	}
	i, found := slices.BinarySearchFunc(remote, pos, func(x RemoteStep, pos int) int { return x.Position - pos })
	if found {
		remote = slices.Delete(remote, i, i+1)
	}
	s.Remote = remote
	if len(s.Remote) == 0 {
		s.Remote = nil
	}
}

// retryRemote marks the remote steps that match to be dispatched again.
func (s *State) retryRemote(match func(RemoteStep) bool) {
	if !slices.ContainsFunc(s.Remote, match) {
		return
	}
	remote := slices.Clone(s.Remote)
	for i, r := range remote {
		if match(r) {
			remote[i].Retry = true
		}
	}
	s.Remote = remote
}

// checkRemoteStreams checks the stream records of a remote step's outcome
// event: each names a stream once, at the step's position, closed the
// way the outcome closes them.
func checkRemoteStreams(e Event, position int, streams []StreamClosedData, outcome string) error {
	if len(streams) > MaxStreams {
		return invalidf(nil, "event %d (%s): %d streams, over the limit of %d", e.Seq, e.Data.EventType(), len(streams), MaxStreams)
	}
	seen := make(map[string]bool, len(streams))
	for _, st := range streams {
		if err := ValidStreamName(st.Name); err != nil {
			return invalidf(err, "event %d (%s)", e.Seq, e.Data.EventType())
		}
		switch {
		case seen[st.Name]:
			return invalidf(nil, "event %d (%s): stream %q recorded twice", e.Seq, e.Data.EventType(), st.Name)
		case st.Position != position:
			return invalidf(nil, "event %d (%s): stream %q at position %d, not the step's %d", e.Seq, e.Data.EventType(), st.Name, st.Position, position)
		case st.Chunks < 0 || st.Bytes < 0:
			return invalidf(nil, "event %d (%s): stream %q of %d chunks of %d bytes", e.Seq, e.Data.EventType(), st.Name, st.Chunks, st.Bytes)
		case st.Outcome != outcome:
			return invalidf(nil, "event %d (%s): stream %q %s, not %s", e.Seq, e.Data.EventType(), st.Name, st.Outcome, outcome)
		}
		seen[st.Name] = true
	}
	return nil
}
