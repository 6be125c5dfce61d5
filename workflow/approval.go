package workflow

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// Decision is a person's answer to an approval: the payload of an approval
// signal, as JSON {"approved": true, "comment": "...", "by": "..."}.
type Decision struct {
	// Approved is the answer: true to approve, false to reject. A payload
	// must say it.
	Approved bool `json:"approved"`
	// Comment is what the person added, if anything.
	Comment string `json:"comment,omitempty"`
	// By is who decided: the signal's sender, which the sending side
	// sets from who it authenticated ("api:<token>", "console:<token>",
	// "callback" for a signed callback URL, the SDK client's
	// SignalOpts.Sender, requester or identity), never what the payload
	// claims. A payload's "by" counts only for a signal without a sender.
	By string `json:"by,omitempty"`
}

// ErrMalformedDecision marks the error of [AwaitApproval] when the signal
// it took does not hold a Decision: no payload, a payload that is not a
// JSON object, or one without a boolean "approved".
var ErrMalformedDecision = errors.New("malformed decision")

// AwaitApproval waits up to timeout for the approval signal called name
// and returns its [Decision]; ok is false when timeout passed with none.
// It is [Receive] (the same waiting, replay and ordering rules; it takes
// one receive of name) with the payload read as a Decision whose By is
// the signal's sender (see [Decision]).
//
// Send the decision with sdk.Client.Signal (payload workflow.Decision or
// the same JSON), POST /v1/tasks/{id}/signals/{name}, cairn task signal,
// or a signed one-time callback URL (see sdk.CallbackToken). A signal that
// does not hold a decision is taken and returned as an error marked
// [ErrMalformedDecision] (ok true), for the workflow to decide what to do:
// fail, or wait again.
func AwaitApproval(ctx Context, name string, timeout time.Duration) (Decision, bool, error) {
	sig, pos, ok, err := interpreter.ReceiveSignal(ctx, name, timeout)
	if err != nil || !ok {
		return Decision{}, false, err
	}
	d, err := decodeDecision(sig.Payload)
	if err != nil {
		err = errors.Wrapf(err, "approval %q (receive %d, event %d)", name, pos, sig.Seq)
		return Decision{}, true, errmark.Mark(err, ErrMalformedDecision)
	}
	if sig.Sender != "" {
		// Who sent it, as authenticated: a payload may say anything.
		d.By = sig.Sender
	}
	return d, true, nil
}

// decodeDecision reads an approval signal's payload.
func decodeDecision(raw json.RawMessage) (Decision, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return Decision{}, errors.New(`the signal has no payload; send {"approved": true|false, "comment": "..."}`)
	}
	var p struct {
		Approved *bool  `json:"approved"`
		Comment  string `json:"comment"`
		By       string `json:"by"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return Decision{}, errors.Wrap(err, `the payload is not a decision {"approved": true|false, "comment": "..."}`)
	}
	if p.Approved == nil {
		return Decision{}, errors.New(`the payload does not say "approved": true or false`)
	}
	return Decision{Approved: *p.Approved, Comment: p.Comment, By: p.By}, nil
}
