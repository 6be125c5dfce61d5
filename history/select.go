package history

import (
	"slices"
)

// A workflow.Select waits on several things at once (signals, children,
// timers, futures) and goes on with the first that is ready. It takes a
// position among the workflow's receives, as a receive does; its decision
// is recorded (select_matched), so a replay takes the recorded case
// whatever else the history holds by then. A select that finds nothing
// ready ends the attempt with a wait_started carrying [SelectWait].

// The kinds of a select's cases, as select_matched records them.
const (
	SelectSignal = "signal" // a signal of a name arrived
	SelectChild  = "child"  // a child finished
	SelectTimer  = "timer"  // the select's timer fired
	SelectFuture = "future" // a step started with workflow.Go finished
)

// MaxSelectCases bounds the cases of one select, and so the names and
// positions its wait_started lists.
const MaxSelectCases = 64

// SelectWait is what the wait of a workflow.Select waits on, besides its
// deadline (the earliest of its timers): the names of its signal cases
// and the positions of the children of its child cases (and, while the
// cap on running children holds starts back, of every running child, so
// the end of one starts more).
type SelectWait struct {
	Signals  []string `json:"signals,omitempty"`
	Children []int    `json:"children,omitempty"`
}

// Awaits reports whether a signal called name ends the wait w: the
// receive's name, or one of a select's signal names.
func (w *Wait) Awaits(name string) bool {
	if w.Select != nil {
		return slices.Contains(w.Select.Signals, name)
	}
	return w.Name == name
}

// SelectMatchedData is the payload of select_matched: the workflow's
// select at Position (its ordinal among the workflow's receives, counted
// from 0) went on with its case Case (the index of the case in the
// select's call), of Kind (one of the Select* constants). Name is the
// signal's name (kind signal), Child the child's position (kind child),
// Step the future's step position (kind future); Seq is the event that
// made the case ready, a signal_received or child_finished (0 for a timer
// or a future). It is written when the select decides, live; a replay
// takes the recorded case. A signal case that did not win takes no
// signal: it stays for a later receive or select of its name.
type SelectMatchedData struct {
	Position int    `json:"position"`
	Case     int    `json:"case"`
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Child    int    `json:"child,omitempty"`
	Step     int    `json:"step,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
}

// SelectMatch is a select's decision (select_matched) as the state keeps
// it; its fields are [SelectMatchedData]'s.
type SelectMatch struct {
	Position int
	Case     int
	Kind     string
	Name     string
	Child    int
	Step     int
	Seq      int64
}

// checkSelectWait checks the select part of a wait_started.
func checkSelectWait(e Event, p WaitStartedData) error {
	sel := p.Select
	switch {
	case p.Name != "":
		return invalidf(nil, "event %d (%s): a select's wait names no signal of its own (got %q)", e.Seq, WaitStarted, p.Name)
	case len(sel.Signals)+len(sel.Children) == 0 && p.Deadline.IsZero():
		return invalidf(nil, "event %d (%s): a select's wait awaits nothing", e.Seq, WaitStarted)
	case len(sel.Signals) > MaxSelectCases:
		return invalidf(nil, "event %d (%s): a select's wait lists %d signals, over the limit of %d", e.Seq, WaitStarted, len(sel.Signals), MaxSelectCases)
	}
	for _, name := range sel.Signals {
		if name == "" {
			return invalidf(nil, "event %d (%s): a select's wait lists an empty signal name", e.Seq, WaitStarted)
		}
	}
	return nil
}

// checkSelectChildren checks that the children a select's wait lists
// were started and have not finished.
func (s *State) checkSelectChildren(e Event, positions []int) error {
	for _, pos := range positions {
		if pos < 0 || pos >= len(s.Children) {
			return invalidf(nil, "event %d (%s): no child %d was started", e.Seq, WaitStarted, pos)
		}
		if s.Children[pos].Finished {
			return invalidf(nil, "event %d (%s): child %d has finished", e.Seq, WaitStarted, pos)
		}
	}
	return nil
}

func (s *State) applySelectMatched(e Event, p SelectMatchedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch {
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, SelectMatched)
	case p.Position < 0:
		return invalidf(nil, "event %d (%s): position %d", e.Seq, SelectMatched, p.Position)
	case p.Case < 0 || p.Case >= MaxSelectCases:
		return invalidf(nil, "event %d (%s): case %d is outside 0..%d", e.Seq, SelectMatched, p.Case, MaxSelectCases-1)
	}
	if n := len(s.Selects); n > 0 && p.Position <= s.Selects[n-1].Position {
		return invalidf(nil, "event %d (%s): position %d does not follow select %d", e.Seq, SelectMatched, p.Position, s.Selects[n-1].Position)
	}
	if n := len(s.Waits); n > 0 && p.Position < s.Waits[n-1].Position {
		return invalidf(nil, "event %d (%s): position %d comes before receive %d, which waited", e.Seq, SelectMatched, p.Position, s.Waits[n-1].Position)
	}
	if w := s.Wait; w != nil && (w.Select == nil || w.Position != p.Position) {
		return invalidf(nil, "event %d (%s): receive %d waits for signal %q", e.Seq, SelectMatched, w.Position, w.Name)
	}
	if err := s.checkMatch(e, p); err != nil {
		return err
	}
	// The select's own wait, if it waited and its timer won (or it went on
	// after a wake), ends here.
	s.Wait = nil
	// Clipped: a state shares its slices with those before it.
	s.Selects = append(slices.Clip(s.Selects), SelectMatch(p))
	return nil
}

// checkMatch checks that what p says made its case ready is in the
// history.
func (s *State) checkMatch(e Event, p SelectMatchedData) error {
	switch p.Kind {
	case SelectSignal:
		i, ok := slices.BinarySearchFunc(s.Signals, p.Seq, func(sig Signal, seq int64) int { return int(sig.Seq - seq) })
		if p.Name == "" || !ok || s.Signals[i].Name != p.Name {
			return invalidf(nil, "event %d (%s): no signal %q was received at event %d", e.Seq, SelectMatched, p.Name, p.Seq)
		}
	case SelectChild:
		if p.Child < 0 || p.Child >= len(s.Children) || !s.Children[p.Child].Finished || s.Children[p.Child].FinishedSeq != p.Seq {
			return invalidf(nil, "event %d (%s): child %d did not finish at event %d", e.Seq, SelectMatched, p.Child, p.Seq)
		}
	case SelectFuture:
		if _, ok := s.StepAt(p.Step); !ok || p.Seq != 0 {
			return invalidf(nil, "event %d (%s): step %d is not on record", e.Seq, SelectMatched, p.Step)
		}
	case SelectTimer:
		if p.Seq != 0 {
			return invalidf(nil, "event %d (%s): a timer has no event (seq %d)", e.Seq, SelectMatched, p.Seq)
		}
	default:
		return invalidf(nil, "event %d (%s): unknown kind %q", e.Seq, SelectMatched, p.Kind)
	}
	return nil
}
