package interpreter

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Mailbox is what a run's receives read from the task's state: the signals
// received, in history order, the receives that waited, and the one the
// task waits on now (history.State's Signals, Waits and Wait).
//
// Selects are the selects decided (history.State.Selects).
type Mailbox struct {
	Signals []history.Signal
	Waits   []history.Wait
	Wait    *history.Wait
	Selects []history.SelectMatch
}

// MailboxOf returns the mailbox of a task in state s.
func MailboxOf(s history.State) Mailbox {
	return Mailbox{Signals: s.Signals, Waits: s.Waits, Wait: s.Wait, Selects: s.Selects}
}

// receiveState is a run's progress through its receives. Receives have
// positions of their own (their order among the run's receives), apart
// from the steps': a receive that takes a signal already there writes
// nothing, so it cannot hold a step position.
type receiveState struct {
	next  int            // position of the next Receive call
	taken map[string]int // signals taken so far, by name
}

// WaitRequest is the error a run ends with when a receive finds no signal
// and must wait: the caller records wait_started, which ends the attempt;
// the task is due again when a signal of the name arrives or at Deadline.
// A select's wait has no Name and a Select instead (see [Select]).
type WaitRequest struct {
	Position int
	Name     string
	Deadline time.Time
	Select   *history.SelectWait
}

func (r *WaitRequest) Error() string {
	if r.Select != nil {
		return fmt.Sprintf("select %d waits for signals %q, children %v until %s", r.Position, r.Select.Signals, r.Select.Children, r.Deadline.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("receive %d waits for signal %q until %s", r.Position, r.Name, r.Deadline.Format(time.RFC3339Nano))
}

// maxClockSkewWait bounds how long a receive woken at its deadline by the
// database's clock waits out this worker's clock being behind, holding the
// attempt; beyond it, the wait is recorded again with the same deadline.
const maxClockSkewWait = 5 * time.Second

// Receive returns the next signal called name for ctx's run, decoded into
// T, or waits for one up to timeout: what workflow.Receive does (its
// documentation holds the contract for authors). ok is false when the
// receive timed out.
//
// The Nth receive of a name that does not time out takes the Nth signal
// of that name in history order, so replay needs no record of which
// receive took which signal. A receive that waited is recorded
// (wait_started, and wait_timed_out if no signal came): on replay, a
// receive at that position must have the recorded name.
func Receive[T any](ctx Context, name string, timeout time.Duration) (T, bool, error) {
	var out T
	sig, pos, ok, err := receive(ctx, name, timeout)
	if err != nil || !ok {
		return out, false, err
	}
	if len(sig.Payload) > 0 {
		if err := json.Unmarshal(sig.Payload, &out); err != nil {
			var zero T
			return zero, true, errors.Wrapf(err, "receive %d: decode signal %q (event %d)", pos, name, sig.Seq)
		}
	}
	return out, true, nil
}

// ReceiveSignal is [Receive] returning the signal taken as it is in the
// history (its payload undecoded, its sender and dedup id), for helpers
// built on receives such as workflow.AwaitApproval. pos is the receive's
// position among the run's receives.
func ReceiveSignal(ctx Context, name string, timeout time.Duration) (sig history.Signal, pos int, ok bool, err error) {
	return receive(ctx, name, timeout)
}

// receive is receiveAny refusing a signal whose payload is still sealed:
// decoded as it is, it would read as a zero value. The run ends.
func receive(ctx Context, name string, timeout time.Duration) (history.Signal, int, bool, error) {
	sig, pos, ok, err := receiveAny(ctx, name, timeout)
	if err == nil && ok && history.MaybeSealed(sig.Payload) {
		return history.Signal{}, pos, false, ctx.run().abort(errSealed(fmt.Sprintf("the payload of signal %q (event %d)", name, sig.Seq)), nil)
	}
	if err == nil && ok && history.MaybeBlobEnvelope(sig.Payload) {
		return history.Signal{}, pos, false, ctx.run().abort(errUnreadBlob(fmt.Sprintf("the payload of signal %q (event %d)", name, sig.Seq)), nil)
	}
	return sig, pos, ok, err
}

// receiveAny is Receive without the decoding: the signal taken (ok), or
// none when the receive timed out or the run must stop (err).
func receiveAny(ctx Context, name string, timeout time.Duration) (history.Signal, int, bool, error) {
	var zero history.Signal
	s := ctx.run()
	if err := s.enter("Receive"); err != nil {
		return zero, 0, false, err
	}
	if err := s.yield("receive"); err != nil {
		return zero, 0, false, err
	}
	pos := s.recv.next
	if name == "" || timeout <= 0 {
		err := errors.Newf("receive %d: a receive needs a signal name and a timeout above 0 (got %q, %s)", pos, name, timeout)
		return zero, pos, false, s.abort(errmark.Mark(err, ErrBadStepOpts), nil)
	}
	box := s.mailbox()
	if err := selectConflict(box, pos, fmt.Sprintf("(receive of %q)", name)); err != nil {
		return zero, pos, false, s.abort(err, nil)
	}
	if w := recordedWait(box, pos); w != nil {
		if w.Name != name {
			return zero, pos, false, s.abort(nondeterministicReceive(pos, w.Name, name), nil)
		}
		if w.TimedOut {
			s.recv.next++
			return zero, pos, false, nil
		}
	}
	if sig, ok := takeSignal(&s.recv, box, name); ok {
		return sig, pos, true, nil
	}
	if s.p.CollectOnly {
		return zero, pos, false, s.abort(s.collect(fmt.Sprintf("receive %d of %q", pos, name), "receive"), nil)
	}
	if err := s.settle(); err != nil {
		return zero, pos, false, err
	}
	// Recording the last step may have brought a signal sent meanwhile
	// into the attempt's state.
	box = s.mailbox()
	if sig, ok := takeSignal(&s.recv, box, name); ok {
		return sig, pos, true, nil
	}
	return zero, pos, false, s.waitOrTimeOut(box.Wait, pos, name, timeout)
}

// takeSignal takes the next signal called name in box for the next
// receive, if there is one (ok).
func takeSignal(r *receiveState, box Mailbox, name string) (history.Signal, bool) {
	sig, ok := r.nextSignal(box, name)
	if !ok {
		return sig, false
	}
	r.take(name)
	r.next++
	return sig, true
}

// mailbox reads the task's signals and waits behind the completions
// being recorded (see children).
func (s *runState) mailbox() Mailbox {
	if s.p.Mailbox == nil {
		return Mailbox{}
	}
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	return s.p.Mailbox()
}

// waitOrTimeOut ends the receive at pos, which found no signal: it times
// out if the task waits on it and its deadline has passed (the result is
// then nil: the run goes on), or the run ends to wait.
func (s *runState) waitOrTimeOut(w *history.Wait, pos int, name string, timeout time.Duration) error {
	if w == nil || w.Position != pos {
		return s.abort(&WaitRequest{Position: pos, Name: name, Deadline: s.now().Add(timeout)}, nil)
	}
	left := w.Deadline.Sub(s.now())
	if left > maxClockSkewWait {
		// Woken early (a requeue, a hand-back): wait again, to the same
		// deadline.
		return s.abort(&WaitRequest{Position: pos, Name: name, Deadline: w.Deadline}, nil)
	}
	// Woken by the database's clock, which this worker's may trail.
	if err := s.waitOut(left); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = history.WaitTimedOutData{Name: name, Position: pos}
	s.recv.next++
	return s.aborted
}

// recordedWait returns the wait recorded for the receive at pos, or nil.
func recordedWait(m Mailbox, pos int) *history.Wait {
	for i := range m.Waits {
		if m.Waits[i].Position == pos {
			return &m.Waits[i]
		}
	}
	return nil
}

// nextSignal returns the first signal called name not taken yet.
func (r *receiveState) nextSignal(m Mailbox, name string) (history.Signal, bool) {
	skip := r.taken[name]
	for _, sig := range m.Signals {
		if sig.Name != name {
			continue
		}
		if skip == 0 {
			return sig, true
		}
		skip--
	}
	return history.Signal{}, false
}

func (r *receiveState) take(name string) {
	if r.taken == nil {
		r.taken = map[string]int{}
	}
	r.taken[name]++
}

func nondeterministicReceive(position int, recorded, called string) error {
	err := errors.WithStack(&NondeterminismError{Kind: "receive", Position: position, Recorded: recorded, Called: called})
	err = errors.WithHint(err, "a workflow must make the same receives in the same order on every run; "+
		"register a new workflow version to change them")
	return errmark.Mark(err, ErrNondeterministic)
}
