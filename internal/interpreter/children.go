package interpreter

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Children are child workflows the run starts (what workflow.StartChild
// and workflow.MapChildren are made of). Like receives they have positions
// of their own, their order among the run's StartChild calls, assigned on
// the body's goroutine: the Nth StartChild of every run is child N.
//
// A start is not written when StartChild is called but at the run's next
// point that waits or runs something: a child's result awaited, a step
// about to run, a sleep or a receive about to wait, the body's return.
// Then the queued starts go out in one write, as many as the cap on
// running children allows (the parent's child_started and the children's tasks in one
// transaction, through RunParams.StartChildren). A child held back by the
// cap is started when a running one finishes: the run awaits any running
// child then, and the next attempt, replaying to the same point, starts
// more.

// DefaultMaxRunningChildren is how many of a run's children may be
// running at once when RunParams.MaxRunningChildren is 0.
const DefaultMaxRunningChildren = 100

var (
	// ErrChildFailed marks a [*ChildError]: the child ended other than
	// completed.
	ErrChildFailed = errors.New("cairn/workflow: child workflow did not complete")
)

// ChildRequest is a child to start: what RunParams.StartChildren writes.
type ChildRequest struct {
	Position    int
	TaskType    string
	TypeVersion int
	Input       json.RawMessage
	Options     ChildOptions
}

// ChildOptions are a child's options as the interpreter and the executor
// use them: workflow.ChildOpts translated (its fields document them).
type ChildOptions struct {
	Queue         string
	Priority      int
	MaxAttempts   int
	Labels        map[string]string
	FairnessKey   string
	OnParentClose string
	// ScheduleToClose is the child type's deadline, counted from its start.
	ScheduleToClose time.Duration
	// Budget is the child type's own budget (its WorkflowOpts.Budget), if
	// any; the parent's budgets cover the child too.
	Budget *history.TaskBudget
}

// ChildWaitRequest is the error a run ends with when it must wait for a
// child: the caller records child_wait_started, which ends the attempt;
// the task is due again when Count (0: one) of the children at Positions
// have finished.
type ChildWaitRequest struct {
	Positions []int
	Count     int
}

func (r *ChildWaitRequest) Error() string {
	return fmt.Sprintf("awaiting children %v", r.Positions)
}

// ChildError is a child that ended other than completed, as its parent
// sees it: the child's outcome and its failure evidence, from the
// parent's child_finished. It unwraps to [ErrChildFailed].
type ChildError struct {
	Position int
	ChildID  string
	TaskType string
	Status   history.Status
	// Info is the child's failure evidence (its last error); nil for a
	// child cancelled or expired without one.
	Info *history.ErrorInfo
}

func (e *ChildError) Error() string {
	msg := fmt.Sprintf("child %d (%s, task %s) %s", e.Position, e.TaskType, e.ChildID, e.Status)
	if e.Info != nil {
		msg += ": " + e.Info.Message
	}
	return msg
}

// Unwrap makes the error match [ErrChildFailed].
func (e *ChildError) Unwrap() error { return ErrChildFailed }

// childState is a run's progress through its children.
type childState struct {
	next   int            // position of the next StartChild call
	queued []ChildRequest // started by the body, not written yet, in position order
}

// ChildHandle is a child started by [StartChild]: its position.
type ChildHandle struct{ Position int }

// StartChild starts req's workflow as the run's next child (req.Position
// is assigned here) and returns its handle. A child the history recorded
// at the position is not started again; its type must be the recorded
// one, or the run ends as non-deterministic.
func StartChild(ctx Context, req ChildRequest) (ChildHandle, error) {
	s := ctx.run()
	if err := s.enter("StartChild"); err != nil {
		return ChildHandle{}, err
	}
	if err := s.yield("child"); err != nil {
		return ChildHandle{}, err
	}
	s.mu.Lock()
	pos := s.child.next
	s.child.next++
	s.mu.Unlock()
	req.Position = pos
	children := s.children()
	if pos < len(children) {
		if c := children[pos]; c.TaskType != req.TaskType {
			return ChildHandle{Position: pos}, s.abort(nondeterministicChild(pos, c.TaskType, req.TaskType), nil)
		}
		return ChildHandle{Position: pos}, nil
	}
	if s.p.Strict {
		if err := s.strictNew(fmt.Sprintf("child %d of type %q", pos, req.TaskType), "child"); err != nil {
			return ChildHandle{Position: pos}, s.abort(err, nil)
		}
	}
	s.mu.Lock()
	s.child.queued = append(s.child.queued, req)
	s.mu.Unlock()
	return ChildHandle{Position: pos}, nil
}

// ChildResult returns the outcome of the child at h's position: its
// output when it completed, a [*ChildError] when it did not. A child not
// finished yet ends the run to wait for it (see [AwaitChildren]).
func ChildResult(ctx Context, h ChildHandle) (json.RawMessage, error) {
	if err := AwaitChildren(ctx, []ChildHandle{h}); err != nil {
		return nil, err
	}
	out, err, _ := finishedChild(ctx.run().children(), h.Position)
	if err == nil && history.MaybeSealed(out) {
		// Decoded as it is, it would read as a zero value: the child was
		// erased, or this worker has no key for it. The run ends.
		return nil, ctx.run().abort(errSealed(fmt.Sprintf("the output of child %d", h.Position)), nil)
	}
	if err == nil && history.MaybeBlobEnvelope(out) {
		return nil, ctx.run().abort(errUnreadBlob(fmt.Sprintf("the output of child %d", h.Position)), nil)
	}
	return out, err
}

// AwaitChildren waits until every child in hs has finished: the run ends
// to wait for all the unfinished ones at once (a [*ChildWaitRequest] whose
// Count is theirs), not one by one, so a fan-in of n children wakes its
// parent once rather than up to n times. While the cap holds starts back,
// it waits as a held-back run does (see heldBackWait).
func AwaitChildren(ctx Context, hs []ChildHandle) error {
	s := ctx.run()
	if err := s.enter("AwaitChildren"); err != nil {
		return err
	}
	if err := s.yield("await"); err != nil {
		return err
	}
	if len(unfinishedOf(s.children(), hs)) == 0 {
		return nil
	}
	if s.p.CollectOnly {
		return s.abort(s.collect(fmt.Sprintf("await children %v", unfinishedOf(s.children(), hs)), "await"), nil)
	}
	if err := s.settle(); err != nil {
		return err
	}
	for {
		// Writing may have brought a child's end into the attempt's state.
		children := s.children()
		waiting := unfinishedOf(children, hs)
		switch {
		case len(waiting) == 0:
			return nil
		case s.held():
			if err := s.startHeldBack(heldBackWait(children)); err != nil {
				return err
			}
			continue
		}
		return s.abort(&ChildWaitRequest{Positions: waiting, Count: len(waiting)}, nil)
	}
}

// held reports whether the cap holds starts back.
func (s *runState) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.child.queued) > 0
}

// startHeldBack waits for w's children within the attempt
// (RunParams.AwaitChildEnds) and starts as many more as the cap then
// allows, or, when they do not end in time, ends the run with w. Within
// the attempt a round costs a write, not a replay of the history, so it
// waits for a tenth of the running children rather than w's half.
func (s *runState) startHeldBack(w *ChildWaitRequest) error {
	if !s.awaitHeldBack(w) {
		return s.abort(w, nil)
	}
	return s.startQueued()
}

// awaitHeldBack reports whether a tenth of w's children (at least one)
// ended within the attempt.
func (s *runState) awaitHeldBack(w *ChildWaitRequest) bool {
	if s.p.AwaitChildEnds == nil || s.p.CollectOnly {
		return false
	}
	s.futures.recMu.Lock() // as a record does: the wait writes the attempt's state
	defer s.futures.recMu.Unlock()
	return s.p.AwaitChildEnds(w.Positions, max(len(w.Positions)/10, 1))
}

// settle is what a run does before it may end its attempt to wait (for a
// child, a signal, a timer): the step executed last recorded, the futures
// started before finished (and recorded, or they would run again), a stop
// honoured, and the queued child starts written, so they run while it
// waits.
func (s *runState) settle() error {
	if err := s.flush(); err != nil {
		return err
	}
	s.awaitFutures()
	if err := s.checkpoint(); err != nil {
		return err
	}
	if err := s.dispatchQueued(); err != nil {
		return err
	}
	return s.startQueued()
}

// unfinishedOf returns the positions in hs, ascending, of the children not
// finished (or not started).
func unfinishedOf(children []history.Child, hs []ChildHandle) []int {
	var out []int
	for _, h := range hs {
		if h.Position >= len(children) || !children[h.Position].Finished {
			out = append(out, h.Position)
		}
	}
	slices.Sort(out)
	return out
}

// finishedChild returns the outcome of the child at pos if it finished
// (ok).
func finishedChild(children []history.Child, pos int) (json.RawMessage, error, bool) {
	if pos >= len(children) || !children[pos].Finished {
		return nil, nil, false
	}
	c := children[pos]
	if c.Status == history.StatusCompleted {
		return c.Output, nil, true
	}
	return nil, &ChildError{Position: c.Position, ChildID: c.ID, TaskType: c.TaskType, Status: c.Status, Info: c.Error}, true
}

// heldBackWait is the wait of a run whose starts the cap holds back: for
// half of the running children, so the next attempt starts as many more
// at once rather than one attempt per child that finishes.
func heldBackWait(children []history.Child) *ChildWaitRequest {
	running := runningChildren(children)
	return &ChildWaitRequest{Positions: running, Count: max(len(running)/2, 1)}
}

func runningChildren(children []history.Child) []int {
	var out []int
	for _, c := range children {
		if !c.Finished {
			out = append(out, c.Position)
		}
	}
	return out
}

// startQueued writes the queued starts the cap on running children
// allows, behind the completions being recorded.
func (s *runState) startQueued() error {
	// Nothing queued, the common case: return before recMu, which a
	// future recording its step holds for a round trip (every Step and Go
	// comes through here).
	s.mu.Lock()
	if len(s.child.queued) == 0 {
		defer s.mu.Unlock()
		return s.aborted
	}
	s.mu.Unlock()
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	s.mu.Lock()
	if s.aborted != nil || len(s.child.queued) == 0 || s.p.CollectOnly {
		defer s.mu.Unlock()
		return s.aborted
	}
	s.mu.Unlock()
	room := s.maxRunningChildren() - len(runningChildren(s.childrenLocked()))
	s.mu.Lock()
	n := min(max(room, 0), len(s.child.queued))
	batch := slices.Clone(s.child.queued[:n])
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	if s.p.StartChildren == nil {
		return s.abort(errors.AssertionFailedf("workflow started children, and the run has no StartChildren"), nil)
	}
	err := s.p.StartChildren(batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.futures.broken = true
		return s.abortLocked(errmark.Mark(errors.Wrapf(err, "start children %d to %d", batch[0].Position, batch[n-1].Position), ErrRecordFailed), nil)
	}
	s.child.queued = s.child.queued[n:]
	return s.aborted
}

// finishChildren is what a body that returned still owes its children:
// the queued starts written, or, when the cap holds some back, a wait for
// a running child. nil when nothing is left.
func (s *runState) finishChildren() error {
	s.mu.Lock()
	queued := len(s.child.queued) > 0
	s.mu.Unlock()
	if !queued {
		return nil
	}
	if s.p.CollectOnly {
		return ErrCollected
	}
	if err := s.startQueued(); err != nil {
		return err
	}
	for s.held() {
		w := heldBackWait(s.children())
		if !s.awaitHeldBack(w) {
			return w
		}
		if err := s.startQueued(); err != nil {
			return err
		}
	}
	return nil
}

// children reads the task's children as the attempt knows them, behind
// the completions being recorded: a record (a future's, on its own
// goroutine) writes the attempt's state.
func (s *runState) children() []history.Child {
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	return s.childrenLocked()
}

// childrenLocked is children with futures.recMu held.
func (s *runState) childrenLocked() []history.Child {
	if s.p.Children == nil {
		return nil
	}
	return s.p.Children()
}

func (s *runState) maxRunningChildren() int {
	if s.p.MaxRunningChildren > 0 {
		return s.p.MaxRunningChildren
	}
	return DefaultMaxRunningChildren
}

func nondeterministicChild(position int, recorded, called string) error {
	err := errors.WithStack(&NondeterminismError{Kind: "child", Position: position, Recorded: recorded, Called: called})
	err = errors.WithHint(err, "a workflow must start the same children in the same order on every run; "+
		"register a new workflow version to change them")
	return errmark.Mark(err, ErrNondeterministic)
}
