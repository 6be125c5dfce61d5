package interpreter

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Updates change a running workflow's course from outside (what
// workflow.SetUpdate is made of). A workflow registers a handler, and
// optionally a validator, by name; a client's update is validated by a
// run replayed to the history's frontier ([Inspect]), written
// (update_accepted) only once accepted, and applied by the task's next run:
//
//   - Where. A handler runs at a yield: a call of the workflow API that
//     can wait or run something (Step, Go, Sleep, Receive, Select,
//     StartChild, a child's result, the body's return). Yields are counted from 0 in
//     every run alike, so the Nth yield of a replay is the Nth of the run
//     that recorded the history.
//   - Live. At the first yield at the frontier (the history records
//     nothing at or past it: no step, timer, wait or child the run has
//     not reached) the updates accepted and not completed run, in the
//     order they were accepted; each one's outcome is recorded
//     (update_completed, with the yield's count and the run's next
//     step, receive and child positions) before anything after the yield
//     runs.
//   - Replay. At the yield a recorded update_completed names, its handler
//     runs again with its recorded args (the outcome is the record's), so
//     the workflow's state is what it was; a yield whose positions are not
//     the recorded ones is non-determinism.
//
// A handler may not wait or run steps: calls of the workflow API from it
// (Step, Sleep, Receive, StartChild, …) fail with [ErrUpdateCall], which
// fails the update, not the task. A handler's panic fails the update.
// Handlers are registered as [Register]'s of [KindUpdate]; validation is
// an [Inspect] ([Inspection.ValidateUpdate]).

// KindUpdate is the kind of an update's handler ([SetUpdate]).
const KindUpdate = "update"

var (
	// ErrUpdateCall is what a workflow API call made from an update's
	// handler returns: a handler changes the workflow's state, it does not
	// run steps or wait.
	ErrUpdateCall = errors.New("cairn/workflow: an update handler cannot call the workflow API")
	// ErrUnknownUpdate marks an update whose name has no handler
	// registered in the run where it is validated or applied.
	ErrUnknownUpdate = errors.New("cairn/workflow: no update handler of that name")
)

// UpdateHandler is a registered update in its JSON form: what
// workflow.SetUpdate registers, its arguments and result encoded.
type UpdateHandler struct {
	// Handler applies the update: it may change the workflow's state and
	// returns the update's result. Required.
	Handler func(ctx Context, args json.RawMessage) (json.RawMessage, error)
	// Validator accepts (nil) or rejects the update before it is
	// written. It must only read. Optional: every update is accepted.
	Validator func(args json.RawMessage) error
}

// updateState is a run's updates: the yields passed and the updates it
// applied.
type updateState struct {
	calls   int             // yields passed
	applied map[string]bool // update ids applied in this run (replayed or run)
	running string          // the update whose handler runs now; "" none
}

// ValidateUpdate runs the validator of the update handler registered as
// name in the inspected run with args: nil when it accepts, its error when
// it rejects, an error marked [ErrHandlerNotFound] (a
// [*HandlerNotFoundError]) when no handler of that name is registered. A
// validator's panic rejects.
func (in *Inspection) ValidateUpdate(name string, args json.RawMessage) (err error) {
	h, ok := in.Handler(KindUpdate, name)
	if !ok {
		return in.notFound(KindUpdate, name)
	}
	v := h.(UpdateHandler).Validator
	if v == nil {
		return nil
	}
	if history.MaybeSealed(args) {
		return errSealed(fmt.Sprintf("the args of update %q", name))
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Newf("update %q: validator panicked: %v", name, r)
		}
	}()
	return v(args)
}

// SetUpdate registers h as the handler of updates called name in ctx's
// run, replacing one registered before under that name: [Register] of
// [KindUpdate], what workflow.SetUpdate does. An invalid name or a nil
// handler ends the run with an error marked [ErrBadStepOpts].
func SetUpdate(ctx Context, name string, h UpdateHandler) error {
	if h.Handler == nil {
		return Register(ctx, KindUpdate, name, nil)
	}
	return Register(ctx, KindUpdate, name, h)
}

// updateHandler is the handler of updates called name the run registered.
func (s *runState) updateHandler(name string) (UpdateHandler, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.handlers[KindUpdate][name]
	if !ok {
		return UpdateHandler{}, false
	}
	return h.(UpdateHandler), true
}

// inUpdate refuses a workflow API call (api) made from an update's
// handler, without ending the run.
func (s *runState) inUpdate(api string) error {
	s.mu.Lock()
	id := s.upd.running
	s.mu.Unlock()
	if id == "" {
		return nil
	}
	return errors.WithHint(errors.Wrapf(ErrUpdateCall, "workflow.%s called from the handler of update %q", api, id),
		"an update handler changes the workflow's state and returns; let the workflow body act on that state")
}

// updates reads the task's updates behind the completions being recorded
// (see children).
func (s *runState) updates() []history.Update {
	if s.p.Updates == nil {
		return nil
	}
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	return s.p.Updates()
}

// yield is a call of the workflow API that may wait or run something
// (kind: step, sleep, receive, child, await, return): the recorded updates
// whose handlers ran at this yield run again; at the frontier of a live
// run, the updates not completed run and are recorded. It returns the
// run's abort, if any.
func (s *runState) yield(kind string) error {
	s.mu.Lock()
	if s.aborted != nil {
		defer s.mu.Unlock()
		return s.aborted
	}
	at := history.UpdatePoint{Call: s.upd.calls, Step: s.next, Receive: s.recv.next, Child: s.child.next}
	s.upd.calls++
	s.mu.Unlock()
	all := s.updates()
	if err := s.replayUpdates(all, at); err != nil {
		return err
	}
	// The frontier is looked for only when something is done there: a
	// step's call must not read the mailbox and children for nothing.
	if s.p.CollectOnly || !s.hasPending(all) || !s.atFrontier(kind) {
		return nil
	}
	return s.applyPending(all, at)
}

// replayUpdates runs again the handlers of the updates recorded at the
// yield at, in the order they were recorded.
func (s *runState) replayUpdates(all []history.Update, at history.UpdatePoint) error {
	var here []history.Update
	for _, u := range all {
		if u.Completed && u.At.Call == at.Call && !s.appliedUpdate(u.ID) {
			here = append(here, u)
		}
	}
	slices.SortFunc(here, func(a, b history.Update) int { return int(a.CompletedSeq - b.CompletedSeq) })
	for _, u := range here {
		if u.At != at {
			return s.abort(nondeterministicUpdate(u, at), nil)
		}
		_, err := s.runHandler(u)
		if errors.Is(err, ErrUnknownUpdate) && u.Error == nil {
			// It ran when recorded: the code that registered it is gone.
			return s.abort(nondeterministicUpdate(u, at), nil)
		}
	}
	return nil
}

// applyPending runs the updates accepted and not completed, in the order
// they were accepted, recording each one's outcome at the yield at.
func (s *runState) applyPending(all []history.Update, at history.UpdatePoint) error {
	first := true
	for _, u := range all {
		if u.Completed || s.appliedUpdate(u.ID) {
			continue
		}
		if first {
			// The step executed before the yield goes on record first:
			// the log keeps the run's order.
			if err := s.flush(); err != nil {
				return err
			}
			first = false
		}
		out, err := s.runHandler(u)
		done := history.UpdateCompletedData{UpdateID: u.ID, Output: out, At: at}
		if err != nil {
			done.Output, done.Error = nil, UpdateErrorInfo(err)
		}
		if err := s.recordNow(done); err != nil {
			return err
		}
	}
	return nil
}

// UpdateErrorInfo is the evidence update_completed records of a handler's
// error.
func UpdateErrorInfo(err error) *history.ErrorInfo {
	info := &history.ErrorInfo{Class: history.Permanent, Message: err.Error(), ClassifiedBy: "update"}
	if errors.Is(err, ErrUnknownUpdate) {
		info.Kind = "update_not_found"
	}
	return info
}

// hasPending reports whether all holds an update the run has to apply.
func (s *runState) hasPending(all []history.Update) bool {
	for _, u := range all {
		if !u.Completed && !s.appliedUpdate(u.ID) {
			return true
		}
	}
	return false
}

func (s *runState) appliedUpdate(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upd.applied[id]
}

// runHandler runs u's handler on the body's goroutine, marking u applied:
// its encoded result, or its error (a panic, an args that do not decode,
// a result that does not encode, no handler of u's name).
func (s *runState) runHandler(u history.Update) (out json.RawMessage, err error) {
	s.mu.Lock()
	if s.upd.applied == nil {
		s.upd.applied = map[string]bool{}
	}
	s.upd.applied[u.ID] = true
	s.mu.Unlock()
	h, ok := s.updateHandler(u.Name)
	if !ok {
		return nil, errmark.Mark(errors.Newf("update %q: the workflow registers no handler called %q at this point", u.ID, u.Name), ErrUnknownUpdate)
	}
	if history.MaybeSealed(u.Args) {
		return nil, errSealed(fmt.Sprintf("the args of update %q", u.ID))
	}
	if history.MaybeBlobEnvelope(u.Args) {
		return nil, errUnreadBlob(fmt.Sprintf("the args of update %q", u.ID))
	}
	s.mu.Lock()
	s.upd.running = u.ID
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.upd.running = ""
		s.mu.Unlock()
		if r := recover(); r != nil {
			out, err = nil, errors.Newf("update %q (%s): handler panicked: %v", u.ID, u.Name, r)
		}
	}()
	out, err = h.Handler(runContext{s}, u.Args)
	if err == nil && HasNULEscape(out) {
		err = errors.New("the update's result contains the character U+0000, which PostgreSQL cannot store in JSON")
	}
	return out, err
}

// atFrontier reports whether the history records nothing at or past the
// run's yield of kind: no step or sleep at or past its next step
// position, no timer past it (at it, for a sleep's own), no receive that
// waited past its next receive position (at it, for a receive's or a
// select's own wait that has not timed out), no select decided at or past
// it, no child at or past its next child position.
func (s *runState) atFrontier(kind string) bool {
	s.mu.Lock()
	next, recv, child := s.next, s.recv.next, s.child.next
	ahead := next < s.recordedEnd()
	timer := s.p.Timer
	s.mu.Unlock()
	if ahead || (timer != nil && (timer.Position > next || timer.Position == next && kind != "sleep")) {
		return false
	}
	box := s.mailbox()
	for _, w := range box.Waits {
		if w.Position > recv || (w.Position == recv && (kind != "receive" || w.TimedOut)) {
			return false
		}
	}
	for _, m := range box.Selects {
		if m.Position >= recv {
			return false // a select decided there
		}
	}
	return len(s.children()) <= child
}

// unappliedUpdate is the first recorded update whose handler the run did
// not run again (s.mu not held), or nil: a run that returned without
// reaching it did not make the calls the history recorded.
func (s *runState) unappliedUpdate() *history.Update {
	for _, u := range s.updates() {
		if u.Completed && !s.appliedUpdate(u.ID) {
			return &u
		}
	}
	return nil
}

// returnYield is the body's return as a yield, run on a frame of runBody
// so the handlers it runs are on a body's goroutine.
func (s *runState) returnYield() error {
	_, err := runBody(func(Context, json.RawMessage) (json.RawMessage, error) {
		return nil, s.yield("return")
	}, runContext{s}, nil)
	return err
}

func nondeterministicUpdate(u history.Update, at history.UpdatePoint) error {
	err := errors.WithStack(&NondeterminismError{Kind: "update", Position: u.At.Call,
		Recorded: fmt.Sprintf("update %q (%s) at step %d, receive %d, child %d", u.ID, u.Name, u.At.Step, u.At.Receive, u.At.Child),
		Called:   fmt.Sprintf("(step %d, receive %d, child %d)", at.Step, at.Receive, at.Child)})
	err = errors.WithHint(err, "an update's handler runs again where it first ran; the workflow must make the same calls before it, "+
		"and register the handler before that point")
	return errmark.Mark(err, ErrNondeterministic)
}
