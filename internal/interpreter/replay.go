package interpreter

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
)

// StateParams are the parameters of a run over a task's recorded state:
// its steps (and those ahead), its timer, its mailbox (signals and the
// receives that waited), its children, its remote steps and its patch
// markers, as the state has them. It is
// the one place a [history.State] becomes [RunParams] for a replay, so
// what a state gains is passed on here. The caller adds what its run
// needs beyond the record (Context, Record, …).
func StateParams(taskID string, s history.State) RunParams {
	box := MailboxOf(s)
	children, updates := s.Children, s.Updates
	return RunParams{
		TaskID: taskID, Attempt: s.Attempt, Steps: s.Steps, Ahead: s.Ahead, Timer: s.Timer, Patches: s.Patches, Remote: s.Remote,
		Mailbox:  func() Mailbox { return box },
		Children: func() []history.Child { return children },
		Updates:  func() []history.Update { return updates },
	}
}

// Replay runs fn over the history whose state is s, executing nothing
// (a collect-only, strict run: see [RunParams.Strict]), and reports
// whether fn would make the same calls the history recorded. It returns:
//
//   - nil, nil when fn replays: it reached the end of the record, or
//     returned where the history completed;
//   - a *[NondeterminismError] (and nil) when fn diverges: a step, receive
//     or child other than the recorded one, fewer calls than recorded, a
//     new call while the history records more, or, for a completed
//     history, a call beyond what it recorded;
//   - nil and an error when the replay could not decide, or the task
//     would fail where its history goes on: fn returned an error or
//     panicked on its recorded data (an input or output it cannot
//     decode, a payload still encrypted), or ctx ended.
//
// A history that ended other than completed (failed, cancelled, dead
// lettered) is held to what it recorded, not to how it ended: the code
// may have been fixed since.
func Replay(ctx context.Context, taskID string, s history.State, fn Func) (*NondeterminismError, error) {
	p := StateParams(taskID, s)
	p.Context, p.CollectOnly, p.Strict = ctx, true, true
	p.Record = func(history.Payload) error { return errors.New("a replay records nothing") }
	p.StartChildren = func([]ChildRequest) error { return errors.New("a replay starts no children") }
	res := Run(p, fn, s.Scheduled.Input)
	var nd *NondeterminismError
	switch {
	case errors.As(res.Err, &nd):
		return nd, nil
	case res.Err == nil:
		return nil, nil
	case errors.Is(res.Err, ErrCollected):
		if s.Status == history.StatusCompleted {
			return &NondeterminismError{Kind: "end", Position: len(s.Steps), Recorded: "(workflow returned)", Called: "(" + res.Collected + ")"}, nil
		}
		return nil, nil
	case s.Status.Terminal() && s.Status != history.StatusCompleted, s.Compensation != nil:
		// A history that ended in a failure, or is being compensated
		// after one, may replay to a failure.
		return nil, nil
	}
	return nil, res.Err
}

// collect is collectLocked taking s.mu.
func (s *runState) collect(called, kind string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.collectLocked(called, kind)
}

// collectLocked is the error that ends a collect-only run at a new call
// of kind (step, sleep, receive, child, await) described by called:
// [ErrCollected], or, in a strict run that leaves recorded calls behind,
// their non-determinism.
func (s *runState) collectLocked(called, kind string) error {
	if s.collected == "" {
		s.collected = called
	}
	if !s.p.Strict || kind == "await" {
		return ErrCollected
	}
	if err := s.strictNewLocked(called, kind); err != nil {
		return err
	}
	return ErrCollected
}

// strictNew is strictNewLocked taking s.mu.
func (s *runState) strictNew(called, kind string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.strictNewLocked(called, kind)
}

// strictNewLocked refuses a new call of kind (described by called) while
// the history records a call the run has not reached: a receive that
// waited beyond the run's receives, a child beyond its children, a sleep
// beyond its steps. A strict run executes nothing, so it reads its mailbox
// and children without the record lock.
func (s *runState) strictNewLocked(called, kind string) error {
	called = "(" + called + ")"
	from := s.recv.next
	if kind == "receive" {
		from++ // the receive's own wait is where the history waits now
	}
	if w := s.waitFrom(from); w != nil {
		return nondeterministicReceive(w.Position, w.Name, called)
	}
	if m := s.selectFrom(from); m != nil {
		return nondeterministicSelect(*m, called)
	}
	if s.p.Children != nil {
		if children := s.p.Children(); s.child.next < len(children) {
			return nondeterministicChild(s.child.next, children[s.child.next].TaskType, called)
		}
	}
	if t := s.p.Timer; t != nil && (t.Position > s.next || t.Position == s.next && kind != "sleep") {
		return nondeterministic(t.Position, history.SleepStepName, called)
	}
	// A remote step dispatched at the new call's position or beyond (a
	// remote step's own call has taken its position already).
	if i, _ := slices.BinarySearchFunc(s.p.Remote, s.next, func(r history.RemoteStep, pos int) int { return r.Position - pos }); i < len(s.p.Remote) {
		r := s.p.Remote[i]
		return nondeterministic(r.Position, r.Name, called)
	}
	return nil
}

// unreachedWait is the first receive that waited the run has not reached
// (s.mu held), or nil.
func (s *runState) unreachedWait() *history.Wait { return s.waitFrom(s.recv.next) }

// waitFrom is the first receive that waited at position from or after
// (s.mu held), or nil.
func (s *runState) waitFrom(from int) *history.Wait {
	if s.p.Mailbox == nil {
		return nil
	}
	box := s.p.Mailbox()
	for i := range box.Waits {
		if box.Waits[i].Position >= from {
			w := box.Waits[i]
			return &w
		}
	}
	return nil
}

// Describe is a one-line account of e for reports: its kind, position,
// and the recorded and called names.
func (e *NondeterminismError) Describe() string {
	return fmt.Sprintf("%s %d: recorded %s, called %s", e.Kind, e.Position, e.Recorded, e.Called)
}
