package sdk

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/payload"
)

// SignalOpts are the options of [Client.Signal] and [Client.SignalByKey];
// nil, or the zero value, takes every default.
type SignalOpts struct {
	// DedupID makes the send idempotent: a signal with this id already in
	// the task's history is not written again (the send still succeeds,
	// with Duplicate set). Use it when retrying a send that may have
	// reached the database.
	DedupID string
	// Sender says who sent the signal, for the history. Default: the
	// requester (see [WithRequester]), else the client's Identity.
	Sender string
	// ForWait, when set, sends the signal to one receive only: the one at
	// this position (history.Wait's Position, a callback link's
	// Callback.Wait). It is written only while the task waits there for
	// a signal of this name; otherwise nothing is written and the error
	// is marked [ErrWaitEnded] (the task went past that receive, or
	// finished) or [ErrWaitNotReached], both marked [ErrTaskState] too.
	ForWait *int
}

// ErrWaitEnded and ErrWaitNotReached mark a signal refused because it
// named its receive ([SignalOpts.ForWait]) and the task does not wait
// there: it went past it (or finished), or has not reached it.
var (
	ErrWaitEnded      = cairntype.ErrWaitEnded
	ErrWaitNotReached = cairntype.ErrWaitNotReached
)

// SignalResult says what a signal did.
type SignalResult struct {
	TaskID uuid.UUID
	// Duplicate is set when a signal with the same DedupID was already in
	// the task's history: nothing was written.
	Duplicate bool
}

// Signal sends the task id a signal called name carrying payload (encoded
// as JSON; a json.RawMessage is taken as it is, nil sends none): the
// workflow's next workflow.Receive of name returns it, and a task waiting
// for it is due at once. Signals reach the history at least once (a retried
// send with a DedupID is written once) and each receive takes exactly one.
// A task that has finished is an error marked [ErrTaskState] and nothing is
// written, but a task that continued as new (workflow.ContinueAsNew) passes
// the signal on to its chain's current run, unless opts.ForWait names a
// receive (of the run given); an unknown task is [ErrNotFound]; invalid arguments (no name, a
// payload that is not storable JSON or over the payload limit) are
// [ErrInvalid]. When the task's type declares the signals it receives
// ([WorkflowOpts.Signals]), a name it does not declare is a
// [*SignalNotDeclaredError] and a payload that does not fit its
// declaration a [*SignalPayloadError], both [ErrInvalid] too, and nothing
// is written. opts nil takes every default.
func (c *Client) Signal(ctx context.Context, id uuid.UUID, name string, payload any, opts *SignalOpts) (SignalResult, error) {
	if id == uuid.Nil {
		return SignalResult{}, errmark.Mark(errors.New("signal: no task id"), ErrInvalid)
	}
	return c.signal(ctx, &store.TaskSignalParams{TaskID: id}, name, payload, opts)
}

// SignalByKey is [Client.Signal] to the task started with idempotencyKey
// (StartOpts.IdempotencyKey) in the client's namespace: for a sender that
// knows the business key (an order id, say) but not the task id.
func (c *Client) SignalByKey(ctx context.Context, idempotencyKey, name string, payload any, opts *SignalOpts) (SignalResult, error) {
	if idempotencyKey == "" {
		return SignalResult{}, errmark.Mark(errors.New("signal: no idempotency key"), ErrInvalid)
	}
	return c.signal(ctx, &store.TaskSignalParams{IdempotencyKey: idempotencyKey}, name, payload, opts)
}

func (c *Client) signal(ctx context.Context, p *store.TaskSignalParams, name string, payload any, opts *SignalOpts) (SignalResult, error) {
	if err := c.fillSignal(ctx, p, name, payload, opts); err != nil {
		return SignalResult{}, errmark.Mark(err, ErrInvalid)
	}
	if err := c.checkDeclared(ctx, p); err != nil {
		return SignalResult{}, err
	}
	res, err := c.sendSignal(ctx, p)
	q := *p
	for try := 0; errors.Is(err, ErrTaskState) && q.ForWait == nil && try < maxForwardTries; try++ {
		// Finished: if it continued as new, the signal is for the
		// chain's current run; if that run continues before the signal
		// reaches it, on to the run after it.
		next, ok, ferr := c.currentRun(ctx, &q)
		if ferr != nil {
			return SignalResult{}, ferr
		}
		if !ok {
			break
		}
		q.TaskID, q.IdempotencyKey = next, ""
		if c.beforeForward != nil {
			c.beforeForward(next)
		}
		res, err = c.sendSignal(ctx, &q)
	}
	if err != nil {
		return SignalResult{}, err
	}
	return SignalResult{TaskID: res.TaskID, Duplicate: res.Duplicate}, nil
}

// maxForwardTries bounds the runs a signal is passed on to, each the
// current run of its chain when looked up, that continued as new before
// the signal reached it.
const maxForwardTries = 5

func (c *Client) sendSignal(ctx context.Context, p *store.TaskSignalParams) (store.SignalResult, error) {
	if err := c.signalByReference(ctx, p); err != nil {
		return store.SignalResult{}, err
	}
	return c.store.Signal(ctx, p)
}

// currentRun returns the current run of the chain the task p names
// belongs to, when that task continued as new (ok).
func (c *Client) currentRun(ctx context.Context, p *store.TaskSignalParams) (uuid.UUID, bool, error) {
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.TaskID, IdempotencyKey: p.IdempotencyKey})
	if err != nil || t.Status != history.StatusContinued {
		return uuid.Nil, false, err
	}
	latest, err := engine.LatestRun(ctx, c.store.Engine(), p.Namespace, t.ID)
	if err != nil {
		return uuid.Nil, false, err
	}
	return latest.ID, true, nil
}

// fillSignal checks a signal's arguments and fills p with them.
func (c *Client) fillSignal(ctx context.Context, p *store.TaskSignalParams, name string, payload any, opts *SignalOpts) error {
	o := orZero(opts)
	if err := checkSignalText("name", name, MaxSignalNameBytes); err != nil {
		return err
	}
	if o.DedupID != "" {
		if err := checkSignalText("dedup id", o.DedupID, MaxDedupIDBytes); err != nil {
			return err
		}
	}
	raw, err := c.signalPayload(name, payload, p.TaskID != uuid.Nil && c.blobThreshold > 0)
	if err != nil {
		return err
	}
	if o.ForWait != nil && *o.ForWait < 0 {
		return errors.Newf("signal %q: SignalOpts.ForWait %d is not a receive position", name, *o.ForWait)
	}
	p.Namespace, p.Name, p.Payload, p.DedupID, p.Sender, p.ForWait = c.namespace, name, raw, o.DedupID, o.Sender, o.ForWait
	if p.Sender == "" {
		p.Sender = c.requester(ctx)
	}
	return nil
}

// The bounds of a signal's name and dedup id, checked by [Client.Signal]
// and [Client.SignalByKey] (and so by the HTTP API and the CLI): each is
// kept in every signal_received, and the name in the receive that waits.
const (
	MaxSignalNameBytes = 200
	MaxDedupIDBytes    = 200
)

// checkSignalText refuses a signal's name or dedup id that is empty, over
// max bytes, or not text both stores keep as given (invalid UTF-8, NUL or
// another control character).
func checkSignalText(what, v string, max int) error {
	switch {
	case v == "":
		return errors.Newf("signal: %s is empty", what)
	case len(v) > max:
		return errors.Newf("signal: %s is %d bytes, at most %d allowed", what, len(v), max)
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errors.Newf("signal: %s %q is not valid UTF-8 text without control characters", what, v)
	}
	return nil
}

// signalPayload encodes a signal's payload and checks it as a start's
// input is checked.
func (c *Client) signalPayload(name string, value any, byReference bool) (json.RawMessage, error) {
	if value == nil {
		return nil, nil
	}
	raw, ok := value.(json.RawMessage)
	if ok {
		if len(raw) == 0 {
			return nil, nil // none
		}
		if !json.Valid(raw) {
			return nil, errors.Newf("signal %q: payload is not valid JSON", name)
		}
		if err := jsoncheck.Check(raw, "payload"); err != nil {
			return nil, errors.Wrapf(err, "signal %q", name)
		}
	} else {
		var err error
		if raw, err = json.Marshal(value); err != nil {
			return nil, errors.Wrapf(err, "signal %q: encode payload", name)
		}
		if err := jsoncheck.CheckMarshaled(raw, "payload"); err != nil {
			return nil, errors.Wrapf(err, "signal %q", name)
		}
	}
	if err := checkReserved("payload", raw); err != nil {
		return nil, errors.Wrapf(err, "signal %q", name)
	}
	limit := c.maxPayload
	if byReference && len(raw) > c.blobThreshold {
		limit = payload.MaxBlobBytes // kept as a blob of the task by the payload stage
	}
	if err := checkPayloadSize("payload", raw, limit); err != nil {
		return nil, errors.Wrapf(err, "signal %q", name)
	}
	if interpreter.HasNULEscape(raw) {
		return nil, errors.Newf("signal %q: payload contains the character U+0000, which PostgreSQL cannot store in JSON", name)
	}
	return raw, nil
}

// signalByReference checks, before a signal to a task named by id whose
// payload is over the client's blob threshold is sent, that the task is
// there and not finished: the payload stage keeps such a payload as a
// blob of the task (removed with it), which signal_received records as
// {"cairn_blob": ref} and the receiving workflow reads back, and no blob
// is written for a task gone or finished (the signal is answered as it
// would be). A signal by idempotency key keeps its payload in place.
func (c *Client) signalByReference(ctx context.Context, p *store.TaskSignalParams) error {
	if p.TaskID == uuid.Nil || c.blobThreshold <= 0 || len(p.Payload) <= c.blobThreshold {
		return nil
	}
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.TaskID})
	if err != nil {
		return errors.Wrapf(err, "signal %q to task %s", p.Name, p.TaskID)
	}
	if t.Status.Terminal() {
		return errmark.Mark(errors.Newf("signal %q: task %s has finished (%s)", p.Name, p.TaskID, t.Status), store.ErrTaskState)
	}
	return nil
}
