package interpreter

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Patches change a deployed workflow without breaking the tasks already
// in flight (Temporal's GetVersion/Patched). A patch is a branch in the
// workflow's code: Patched(ctx, id) reports whether this task takes the
// new branch, and the answer is the same on every run of the task:
//
//   - the history holds the marker of id (patch_recorded): true, as the
//     run that recorded it decided;
//   - the history holds progress of the workflow past this point (a step
//     or sleep at or beyond the run's next step position, a timer asleep
//     there, a receive that waited or a select decided at or beyond its
//     next receive position, a child at or beyond its next child
//     position), and no
//     marker: the history was written by code without the patch, false;
//   - the run is at the frontier (nothing recorded past this point):
//     the marker is recorded, and true.
//
// A marker takes no position: it is keyed by its id, and the steps after
// it keep the positions the patched code gives them. It is recorded
// before anything after it runs (the step executed before it first, so
// the log keeps the run's order): a crash after it leaves the marker, and
// the next attempt takes the new branch again.

// Patched reports whether ctx's run takes the branch of patch patchID:
// what workflow.Patched does (its documentation holds the contract for
// authors). An invalid id ends the run with an error marked
// [ErrBadStepOpts]; a marker that cannot be recorded ends it with
// [ErrRecordFailed] (the answer is then true, and the run's next call
// returns the error). A run made with [RunParams.CollectOnly] records
// nothing: at the frontier it answers true.
func Patched(ctx Context, patchID string) bool {
	s := ctx.run()
	if err := s.enter("Patched"); err != nil {
		return false
	}
	return s.patch("Patched", patchID)
}

// DeprecatePatch is [Patched] once every task that ran without the patch
// has ended and the old branch is gone from the code: it records the
// marker at the frontier, as Patched would (so a task's history shows the
// patch whichever code ran it), and on replay accepts a history with or
// without the marker. Its id must be valid, as Patched's.
func DeprecatePatch(ctx Context, patchID string) {
	s := ctx.run()
	if err := s.enter("DeprecatePatch"); err != nil {
		return
	}
	s.patch("DeprecatePatch", patchID)
}

// patch decides patch id for the run (api names the call, for errors),
// recording its marker at the frontier.
func (s *runState) patch(api, id string) bool {
	if err := history.ValidPatchID(id); err != nil {
		err = errmark.Mark(errors.Wrapf(err, "workflow.%s", api), ErrBadStepOpts)
		s.abort(err, nil)
		return false
	}
	s.mu.Lock()
	if took, ok := s.patched[id]; ok {
		// Asked again in the same run: the same answer, no second marker.
		s.mu.Unlock()
		return took
	}
	s.mu.Unlock()
	for _, p := range s.p.Patches {
		if p.ID == id {
			s.decide(id, true)
			return true
		}
	}
	if s.replaying() {
		s.decide(id, false)
		return false
	}
	s.decide(id, true)
	if s.p.CollectOnly {
		return true
	}
	// The step executed before the patch goes first, then the marker:
	// both before anything after the patch runs.
	if err := s.flush(); err != nil {
		return true
	}
	s.mu.Lock()
	pos := s.next
	s.mu.Unlock()
	_ = s.recordNow(history.PatchRecordedData{PatchID: id, Position: pos})
	return true
}

func (s *runState) decide(id string, took bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.patched == nil {
		s.patched = map[string]bool{}
	}
	s.patched[id] = took
}

// replaying reports whether the history holds progress of the workflow
// the run has not reached yet: a step or sleep on record at or beyond its
// next step position, a timer asleep there, a receive that waited or a
// select decided at or beyond its next receive position, a child at or beyond its next child
// position. Such progress was made by the code that wrote the history.
// (A receive that took a signal without waiting, or a step that ran and
// was not recorded, leaves no record: it is not progress a different
// branch could contradict, and runs again.)
func (s *runState) replaying() bool {
	s.mu.Lock()
	next, recv, child := s.next, s.recv.next, s.child.next
	ahead := next < s.recordedEnd()
	timer := s.p.Timer
	s.mu.Unlock()
	if ahead || (timer != nil && timer.Position >= next) {
		return true
	}
	box := s.mailbox()
	for _, w := range box.Waits {
		if w.Position >= recv {
			return true
		}
	}
	for _, m := range box.Selects {
		if m.Position >= recv {
			return true
		}
	}
	return len(s.children()) > child
}
