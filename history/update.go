package history

import (
	"encoding/json"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
)

// UpdateAcceptedData is the payload of update_accepted: RequestedBy asked
// the running workflow to apply the update UpdateID, with the handler
// registered as Name and Args, and the handler's validator accepted it.
// It is written only once accepted (a rejected update writes nothing),
// fenced on the history the validator saw, in any non-terminal state; a
// task waiting (on a signal, a timer or its children) is due at once, so
// a worker replays it to its wait and runs the handler there. An update
// id is accepted at most once per task: a retried update finds it and
// waits for its outcome instead.
type UpdateAcceptedData struct {
	UpdateID    string          `json:"update_id"`
	Name        string          `json:"name"`
	Args        json.RawMessage `json:"args,omitempty"`
	RequestedBy string          `json:"requested_by,omitempty"`
}

// UpdateCompletedData is the payload of update_completed: the handler of
// the accepted update UpdateID ran, in the attempt that writes it, and
// returned Output, or Error when it failed (the task goes on either
// way). At says where in the run it ran: a replay runs the handler again
// at the same point, so the workflow's state is rebuilt as it was.
type UpdateCompletedData struct {
	UpdateID string          `json:"update_id"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    *ErrorInfo      `json:"error,omitempty"`
	At       UpdatePoint     `json:"at"`
}

// UpdatePoint is where in a run an update's handler ran: at the run's
// Call-th call of the workflow API that can wait or run something (a
// step, a sleep, a receive, a child's start or result, the body's
// return: counted from 0), when its next step position was Step, its
// next receive position Receive and its next child position Child.
type UpdatePoint struct {
	Call    int `json:"call"`
	Step    int `json:"step"`
	Receive int `json:"receive"`
	Child   int `json:"child"`
}

// Update is an update the task accepted (update_accepted), with its
// outcome once its handler ran (update_completed).
type Update struct {
	ID          string
	Name        string
	Args        json.RawMessage
	RequestedBy string
	AcceptedSeq int64
	// Completed is set by update_completed, with the handler's Output or
	// Error, where it ran (At) and the event's seq.
	Completed    bool
	Output       json.RawMessage
	Error        *ErrorInfo
	At           UpdatePoint
	CompletedSeq int64
}

// UpdateByID returns the update id the task accepted, if it did.
func (s State) UpdateByID(id string) (Update, bool) {
	for _, u := range s.Updates {
		if u.ID == id {
			return u, true
		}
	}
	return Update{}, false
}

// PendingUpdates returns the updates accepted and not completed, in the
// order they were accepted: the ones the task's next run applies.
func (s State) PendingUpdates() []Update {
	var out []Update
	for _, u := range s.Updates {
		if !u.Completed {
			out = append(out, u)
		}
	}
	return out
}

// The bounds of an update's name and id: each is kept in its events.
const (
	MaxUpdateNameBytes = 200
	MaxUpdateIDBytes   = 200
)

// ValidUpdateText returns why v cannot be an update's name or id (what
// names it), at most max bytes, or nil: 1..max bytes of printable UTF-8
// (spaces allowed, no control characters).
func ValidUpdateText(what, v string, max int) error {
	switch {
	case v == "":
		return errors.Newf("an update %s must not be empty", what)
	case len(v) > max:
		return errors.Newf("update %s of %d bytes is over the limit of %d", what, len(v), max)
	case !utf8.ValidString(v):
		return errors.Newf("update %s %q is not valid UTF-8", what, v)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return errors.Newf("update %s %q holds the unprintable character %U", what, v, r)
		}
	}
	return nil
}

func (s *State) applyUpdateAccepted(e Event, p UpdateAcceptedData) error {
	if err := ValidUpdateText("id", p.UpdateID, MaxUpdateIDBytes); err != nil {
		return invalidf(err, "event %d (%s)", e.Seq, UpdateAccepted)
	}
	if err := ValidUpdateText("name", p.Name, MaxUpdateNameBytes); err != nil {
		return invalidf(err, "event %d (%s)", e.Seq, UpdateAccepted)
	}
	if _, ok := s.UpdateByID(p.UpdateID); ok {
		return invalidf(nil, "event %d (%s): update %q already accepted", e.Seq, UpdateAccepted, p.UpdateID)
	}
	// Clip: a State derived from s may share spare capacity.
	s.Updates = append(slices.Clip(s.Updates), Update{ID: p.UpdateID, Name: p.Name, Args: p.Args, RequestedBy: p.RequestedBy, AcceptedSeq: e.Seq})
	s.wakeForUpdates(e)
	return nil
}

func (s *State) applyUpdateCompleted(e Event, p UpdateCompletedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	at := p.At
	switch {
	case at.Call < 0 || at.Step < 0 || at.Receive < 0 || at.Child < 0:
		return invalidf(nil, "event %d (%s): point %+v", e.Seq, UpdateCompleted, at)
	case p.Error != nil && len(p.Output) > 0:
		return invalidf(nil, "event %d (%s): an output and an error", e.Seq, UpdateCompleted)
	}
	i := slices.IndexFunc(s.Updates, func(u Update) bool { return u.ID == p.UpdateID })
	switch {
	case i < 0:
		return invalidf(nil, "event %d (%s): update %q was not accepted", e.Seq, UpdateCompleted, p.UpdateID)
	case s.Updates[i].Completed:
		return invalidf(nil, "event %d (%s): update %q already completed", e.Seq, UpdateCompleted, p.UpdateID)
	}
	u := s.Updates[i]
	u.Completed, u.Output, u.Error, u.At, u.CompletedSeq = true, p.Output, p.Error, at, e.Seq
	updates := slices.Clone(s.Updates)
	updates[i] = u
	s.Updates = updates
	return nil
}

// wakeForUpdates makes a task that waits (on a signal, a timer or its
// children) due at e, when it has updates not completed: its next run
// replays to the wait, applies them there, and waits again. A task that
// has not started, or retries after a backoff, is left as it is: its
// next run applies them.
func (s *State) wakeForUpdates(e Event) {
	if s.Status != StatusPending || (s.Wait == nil && s.Timer == nil && s.ChildWait == nil && s.RemoteWait == nil) || !e.At.Before(s.RunAt) {
		return
	}
	if !slices.ContainsFunc(s.Updates, func(u Update) bool { return !u.Completed }) {
		return
	}
	s.RunAt = e.At
}
