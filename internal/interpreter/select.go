package interpreter

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Selects wait on several things at once (what workflow.Select is made
// of): signals, children, a timer and futures; the first ready wins. A
// select takes the next position among receives, as a receive does (it
// may wait, and a wait is recorded at a receive position). Its decision
// is recorded (select_matched) when it is made, live: on replay the
// select at that position takes the recorded case, whatever else the
// history holds by then, so nothing about which case was ready first
// needs to be worked out again.
//
// Live, the select looks at its cases in this order of readiness:
//
//   - a signal case is ready when the history holds a signal of its name
//     no earlier receive or select took (the next one of the name, as a
//     receive would take); a child case when its child finished; their
//     key is the seq of that event (signal_received, child_finished);
//   - a future case when its step finished: after every event on record
//     (the run does not see its step_completed's seq);
//   - the timer (the earliest timer case) when it is due: last, as a
//     receive takes a signal that came before its timeout.
//
// The lowest key wins; equal keys (two cases of one signal name, two
// futures) go by case order. A signal case that does not win takes no
// signal: it stays for a later receive or select of its name.
//
// When nothing is ready, futures among the cases still running are
// waited for within the attempt (a future always ends: its step has
// timeouts). With none, the run ends to wait on all the cases at once
// (a [*WaitRequest] with Select): the task is due again when a signal of
// one of the names arrives, one of the children finishes, or at the
// timer's deadline, and the next attempt replays to here and decides.
// The timer is that deadline, the task's run time: a signal or a child
// that ends the wait first replaces it, so a timer that loses leaves
// nothing behind to fire.

// SelectCase is one case of a [Select]: a signal's name, a child, a
// timer's duration or a future, by Kind (a history.Select* constant).
type SelectCase struct {
	Kind   string
	Signal string        // kind signal: the signal's name
	Child  ChildHandle   // kind child: the child started
	Timer  time.Duration // kind timer: how long from the select's first wait; 0 or less is due at once
	Future Selectable    // kind future: a *Future
}

// Selectable is a [*Future] as a select's case sees it.
type Selectable interface {
	selectable() (done <-chan struct{}, pos int)
}

func (f *Future[Out]) selectable() (<-chan struct{}, int) { return f.done, f.pos }

// Selected is the case a [Select] went on with: its index among the
// cases, and for a signal case the signal it took.
type Selected struct {
	Index  int
	Signal history.Signal
}

// The keys of ready cases that have no event: after every event's seq, a
// future's, and after it the timer's.
const (
	futureKey = math.MaxInt64 - 1
	timerKey  = math.MaxInt64
)

// Select waits until one of cases is ready and returns it: what
// workflow.Select does (its documentation holds the contract for
// authors). Errors are the run's abort (a stop, a wait, a failed step or
// record) or a non-determinism error; invalid cases end the run with an
// error marked [ErrBadStepOpts].
func Select(ctx Context, cases []SelectCase) (Selected, error) {
	s := ctx.run()
	if err := s.enter("Select"); err != nil {
		return Selected{}, err
	}
	if err := s.yield("receive"); err != nil {
		return Selected{}, err
	}
	pos := s.recv.next
	if err := s.checkCases(pos, cases); err != nil {
		return Selected{}, s.abort(errmark.Mark(err, ErrBadStepOpts), nil)
	}
	box := s.mailbox()
	if m := recordedSelect(box, pos); m != nil {
		return s.replaySelect(pos, cases, *m, box)
	}
	if w := recordedWait(box, pos); w != nil && w.Select == nil {
		return Selected{}, s.abort(nondeterministicReceive(pos, w.Name, "(select)"), nil)
	}
	if s.p.CollectOnly {
		return Selected{}, s.abort(s.collect(fmt.Sprintf("select %d", pos), "receive"), nil)
	}
	// The select's wait, if it waited already: its deadline is the
	// timer's, counted from the first wait (a select woken by a child it
	// does not select waits again to the same deadline).
	waited := func() *history.Wait {
		if w := recordedWait(box, pos); w != nil && w.Select != nil {
			return w
		}
		return nil
	}
	for {
		// A timer due at once is ready, unless the select waited already
		// (its timer is then the recorded deadline).
		if i, ok := s.readyCase(cases, box, waited() == nil); ok {
			return s.match(pos, cases, i, box)
		}
		if !s.awaitFuture(cases) {
			break
		}
		if err := s.enter("Select"); err != nil {
			return Selected{}, err
		}
		box = s.mailbox()
	}
	if err := s.settle(); err != nil {
		return Selected{}, err
	}
	// Writing may have brought a signal or a child's end into the state.
	box = s.mailbox()
	if i, ok := s.readyCase(cases, box, false); ok {
		return s.match(pos, cases, i, box)
	}
	timer, d := earliestTimer(cases)
	w := waited()
	if w == nil {
		deadline := history.Never
		if timer >= 0 {
			deadline = s.now().Add(d)
		}
		return Selected{}, s.abort(&WaitRequest{Position: pos, Deadline: deadline, Select: s.selectWait(cases)}, nil)
	}
	left := w.Deadline.Sub(s.now())
	if timer < 0 || left > maxClockSkewWait {
		// Woken early (a requeue, a hand-back, a child it does not select
		// while the cap holds starts back): wait again, to the same
		// deadline.
		return Selected{}, s.abort(&WaitRequest{Position: pos, Deadline: w.Deadline, Select: s.selectWait(cases)}, nil)
	}
	// Woken by the database's clock, which this worker's may trail.
	if err := s.waitOut(left); err != nil {
		return Selected{}, err
	}
	return s.match(pos, cases, timer, box)
}

// checkCases refuses a select the run cannot make.
func (s *runState) checkCases(pos int, cases []SelectCase) error {
	if len(cases) == 0 || len(cases) > history.MaxSelectCases {
		return errors.Newf("select %d: a select takes 1 to %d cases (got %d)", pos, history.MaxSelectCases, len(cases))
	}
	s.mu.Lock()
	children := s.child.next
	s.mu.Unlock()
	for i, c := range cases {
		switch c.Kind {
		case history.SelectSignal:
			if c.Signal == "" {
				return errors.Newf("select %d: case %d: a signal case needs a signal name", pos, i)
			}
		case history.SelectChild:
			if c.Child.Position < 0 || c.Child.Position >= children {
				return errors.Newf("select %d: case %d: child %d was not started by this run", pos, i, c.Child.Position)
			}
		case history.SelectFuture:
			if c.Future == nil {
				return errors.Newf("select %d: case %d: no future", pos, i)
			}
			if _, fpos := c.Future.selectable(); fpos < 0 {
				return errors.Newf("select %d: case %d: the future's step was refused before it started", pos, i)
			}
		case history.SelectTimer:
		default:
			return errors.Newf("select %d: case %d: unknown kind %q", pos, i, c.Kind)
		}
	}
	return nil
}

// readyCase returns the case that wins among those ready in box (see the
// order at the top of this file), if any; a timer counts only when
// timerNow and it is due at once.
func (s *runState) readyCase(cases []SelectCase, box Mailbox, timerNow bool) (int, bool) {
	var children []history.Child
	best, bestKey := -1, int64(0)
	consider := func(i int, key int64) {
		if best < 0 || key < bestKey {
			best, bestKey = i, key
		}
	}
	timer, d := earliestTimer(cases)
	for i, c := range cases {
		switch c.Kind {
		case history.SelectSignal:
			if sig, ok := s.recv.nextSignal(box, c.Signal); ok {
				consider(i, sig.Seq)
			}
		case history.SelectChild:
			if children == nil {
				children = s.children()
			}
			if p := c.Child.Position; p < len(children) && children[p].Finished {
				consider(i, children[p].FinishedSeq)
			}
		case history.SelectFuture:
			done, _ := c.Future.selectable()
			select {
			case <-done:
				consider(i, futureKey)
			default:
			}
		case history.SelectTimer:
			if timerNow && i == timer && d <= 0 {
				consider(i, timerKey)
			}
		}
	}
	return best, best >= 0
}

// earliestTimer returns the index of the timer case that fires first
// (the first of equal ones) and its duration, or -1: a later timer can
// never win, as the earliest is ready before it.
func earliestTimer(cases []SelectCase) (int, time.Duration) {
	idx, d := -1, time.Duration(0)
	for i, c := range cases {
		if c.Kind == history.SelectTimer && (idx < 0 || c.Timer < d) {
			idx, d = i, c.Timer
		}
	}
	return idx, d
}

// awaitFuture waits, within the attempt, for the first of the cases'
// futures still running to finish, and reports whether there was one to
// wait for. A stop or the attempt's end cuts the wait short (the run is
// then aborted; the caller's enter returns it).
func (s *runState) awaitFuture(cases []SelectCase) bool {
	var chans []reflect.SelectCase
	for _, c := range cases {
		if c.Kind != history.SelectFuture {
			continue
		}
		done, _ := c.Future.selectable()
		chans = append(chans, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
	}
	if len(chans) == 0 {
		return false
	}
	stopping := len(chans)
	chans = append(chans,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.p.Stopping)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.p.Context.Done())})
	chosen, _, _ := reflect.Select(chans)
	switch chosen {
	case stopping:
		s.abort(ErrStopping, nil)
	case stopping + 1:
		s.abort(context.Cause(s.p.Context), nil)
	}
	return true
}

// selectWait is what the select's wait waits on: its signal names, its
// children not finished, and, while the cap holds starts back, every
// running child (one's end makes room to start more).
func (s *runState) selectWait(cases []SelectCase) *history.SelectWait {
	w := &history.SelectWait{}
	children := s.children()
	seen := map[int]bool{}
	addChild := func(p int) {
		if p < len(children) && !children[p].Finished && !seen[p] {
			seen[p] = true
			w.Children = append(w.Children, p)
		}
	}
	for _, c := range cases {
		switch c.Kind {
		case history.SelectSignal:
			if !containsString(w.Signals, c.Signal) {
				w.Signals = append(w.Signals, c.Signal)
			}
		case history.SelectChild:
			addChild(c.Child.Position)
		}
	}
	if s.held() {
		for _, p := range runningChildren(children) {
			addChild(p)
		}
	}
	return w
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// match records that case i of the select at pos won, live, and takes
// what it won.
func (s *runState) match(pos int, cases []SelectCase, i int, box Mailbox) (Selected, error) {
	c := cases[i]
	m := history.SelectMatchedData{Position: pos, Case: i, Kind: c.Kind}
	var sig history.Signal
	switch c.Kind {
	case history.SelectSignal:
		sig, _ = s.recv.nextSignal(box, c.Signal)
		m.Name, m.Seq = c.Signal, sig.Seq
	case history.SelectChild:
		m.Child = c.Child.Position
		if children := s.children(); m.Child < len(children) {
			m.Seq = children[m.Child].FinishedSeq
		}
	case history.SelectFuture:
		_, m.Step = c.Future.selectable()
	}
	// The step executed before the select goes first, then the decision:
	// the log keeps the run's order.
	if err := s.flush(); err != nil {
		return Selected{}, err
	}
	if err := s.recordNow(m); err != nil {
		return Selected{}, err
	}
	return s.took(pos, c, i, sig)
}

// took ends the select at pos with case i: the signal it won is taken,
// and the receives move on.
func (s *runState) took(pos int, c SelectCase, i int, sig history.Signal) (Selected, error) {
	if c.Kind == history.SelectSignal {
		s.recv.take(c.Signal)
		if err := s.openSignal(sig); err != nil {
			s.recv.next++
			return Selected{}, err
		}
	}
	if c.Kind == history.SelectFuture {
		// Recorded as won: it is done, or (replaying) resolved at once.
		done, _ := c.Future.selectable()
		<-done
	}
	s.recv.next++
	return Selected{Index: i, Signal: sig}, nil
}

// openSignal refuses a signal whose payload the workflow cannot read, as
// a receive does.
func (s *runState) openSignal(sig history.Signal) error {
	if history.MaybeSealed(sig.Payload) {
		return s.abort(errSealed(fmt.Sprintf("the payload of signal %q (event %d)", sig.Name, sig.Seq)), nil)
	}
	if history.MaybeBlobEnvelope(sig.Payload) {
		return s.abort(errUnreadBlob(fmt.Sprintf("the payload of signal %q (event %d)", sig.Name, sig.Seq)), nil)
	}
	return nil
}

// replaySelect takes the case the history recorded for the select at
// pos, m, after checking it is the case the workflow gives there.
func (s *runState) replaySelect(pos int, cases []SelectCase, m history.SelectMatch, box Mailbox) (Selected, error) {
	if m.Case >= len(cases) || !sameCase(cases[m.Case], m) {
		called := fmt.Sprintf("(a select of %d cases)", len(cases))
		if m.Case < len(cases) {
			called = describeCase(m.Case, cases[m.Case])
		}
		return Selected{}, s.abort(nondeterministicSelect(m, called), nil)
	}
	c := cases[m.Case]
	var sig history.Signal
	if c.Kind == history.SelectSignal {
		var ok bool
		sig, ok = s.recv.nextSignal(box, c.Signal)
		if !ok || sig.Seq != m.Seq {
			called := fmt.Sprintf("case %d (signal %q), taking no signal", m.Case, c.Signal)
			if ok {
				called = fmt.Sprintf("case %d (signal %q), taking the signal of event %d", m.Case, c.Signal, sig.Seq)
			}
			return Selected{}, s.abort(nondeterministicSelect(m, called), nil)
		}
	}
	return s.took(pos, c, m.Case, sig)
}

// sameCase reports whether c is the case m recorded.
func sameCase(c SelectCase, m history.SelectMatch) bool {
	if c.Kind != m.Kind {
		return false
	}
	switch c.Kind {
	case history.SelectSignal:
		return c.Signal == m.Name
	case history.SelectChild:
		return c.Child.Position == m.Child
	case history.SelectFuture:
		_, pos := c.Future.selectable()
		return pos == m.Step
	}
	return true
}

// describeCase names case i for a non-determinism error.
func describeCase(i int, c SelectCase) string {
	switch c.Kind {
	case history.SelectSignal:
		return fmt.Sprintf("case %d (signal %q)", i, c.Signal)
	case history.SelectChild:
		return fmt.Sprintf("case %d (child %d)", i, c.Child.Position)
	case history.SelectFuture:
		_, pos := c.Future.selectable()
		return fmt.Sprintf("case %d (future of step %d)", i, pos)
	}
	return fmt.Sprintf("case %d (%s)", i, c.Kind)
}

// describeMatch names what m recorded, as describeCase does.
func describeMatch(m history.SelectMatch) string {
	switch m.Kind {
	case history.SelectSignal:
		return fmt.Sprintf("case %d (signal %q)", m.Case, m.Name)
	case history.SelectChild:
		return fmt.Sprintf("case %d (child %d)", m.Case, m.Child)
	case history.SelectFuture:
		return fmt.Sprintf("case %d (future of step %d)", m.Case, m.Step)
	}
	return fmt.Sprintf("case %d (%s)", m.Case, m.Kind)
}

// recordedSelect returns the decision recorded for the select at pos, or
// nil.
func recordedSelect(box Mailbox, pos int) *history.SelectMatch {
	for i := range box.Selects {
		if box.Selects[i].Position == pos {
			return &box.Selects[i]
		}
	}
	return nil
}

// selectFrom is the first select decided at position from or after
// (s.mu held, in a strict run: see strictNewLocked), or nil.
func (s *runState) selectFrom(from int) *history.SelectMatch {
	if s.p.Mailbox == nil {
		return nil
	}
	box := s.p.Mailbox()
	for i := range box.Selects {
		if box.Selects[i].Position >= from {
			m := box.Selects[i]
			return &m
		}
	}
	return nil
}

// selectConflict refuses a receive (called) at pos where the history
// recorded a select: its decision, or its wait.
func selectConflict(box Mailbox, pos int, called string) error {
	if m := recordedSelect(box, pos); m != nil {
		return nondeterministicSelect(*m, called)
	}
	if w := recordedWait(box, pos); w != nil && w.Select != nil {
		return nondeterministicReceive(pos, "(select)", called)
	}
	return nil
}

func nondeterministicSelect(m history.SelectMatch, called string) error {
	err := errors.WithStack(&NondeterminismError{Kind: "select", Position: m.Position, Recorded: describeMatch(m), Called: called})
	err = errors.WithHint(err, "a workflow must make the same receives and selects, with the same cases in the same order, on every run; "+
		"register a new workflow version to change them")
	return errmark.Mark(err, ErrNondeterministic)
}
