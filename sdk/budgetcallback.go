package sdk

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// BudgetCallback is what a signed one-time budget callback link does:
// raise the budget Ref (its window starting at Window; zero for a task's
// budget) by USD and Tokens, for the task TaskID of Namespace while it
// waits on it in the wait that began with its budget_refused at Seq,
// until Expires. For names whom the link was made for; the raise is
// recorded as by "callback" ("callback:<For>" when set). The amounts are
// signed in: whoever holds the link raises by them and no more.
type BudgetCallback struct {
	Namespace string
	TaskID    uuid.UUID
	Ref       string
	Window    time.Time
	Seq       int64
	USD       float64
	Tokens    int64
	For       string
	Expires   time.Time
}

// By is who the ledger records as raising the budget through cb's link.
func (cb BudgetCallback) By() string {
	if cb.For == "" {
		return budgetCallbackBy
	}
	return budgetCallbackBy + ":" + cb.For
}

// budgetCallbackBy starts the By of every raise through a link.
const budgetCallbackBy = "callback"

const (
	budgetCallbackVersion = 1
	budgetCallbackContext = "cairn budget callback v1\n" // MAC domain separation, apart from signal links
	budgetCallbackFixed   = 1 + 8 + 16 + 8 + 8           // version, expiry, task id, window, usd
)

// BudgetCallbackToken signs cb with secret (HMAC-SHA256, apart from
// [CallbackToken]'s signal links: neither token passes for the other) and
// returns the token of a one-time link {base}/v1/callbacks/budget/{token}
// on a server whose Config.CallbackSecret is secret (see
// server.Server.BudgetCallbackURL). The token carries cb in clear; it is
// a capability, not a secret of the task's. The expiry is kept to the
// second, the window to the second. Make cb with [Client.BudgetCallback].
func BudgetCallbackToken(secret []byte, cb BudgetCallback) (string, error) {
	invalid := func(why string) (string, error) {
		return "", errmark.Mark(errors.New("budget callback token: "+why), ErrInvalid)
	}
	switch {
	case len(secret) < MinCallbackSecretBytes:
		return invalid("the secret is too short")
	case cb.TaskID == uuid.Nil || cb.Seq < 1 || cb.Expires.IsZero():
		return invalid("a task id, the seq of its budget_refused and an expiry are required")
	case history.ValidBudgetRef(cb.Ref) != nil:
		return invalid("no budget reference")
	case math.IsNaN(cb.USD) || math.IsInf(cb.USD, 0) || cb.USD < 0 || cb.Tokens < 0 || (cb.USD == 0 && cb.Tokens == 0):
		return invalid("the raise's USD and Tokens must be finite, >= 0, and not both 0")
	case len(cb.For) > maxKeyLen || !validText(cb.For):
		return invalid("For is over 512 bytes or not text")
	}
	if err := ValidateName("namespace", cb.Namespace); err != nil {
		return "", errmark.Mark(errors.Wrap(err, "budget callback token"), ErrInvalid)
	}
	body := make([]byte, budgetCallbackFixed, budgetCallbackFixed+64+len(cb.Namespace)+len(cb.Ref)+len(cb.For)+sha256.Size)
	body[0] = budgetCallbackVersion
	binary.BigEndian.PutUint64(body[1:9], uint64(cb.Expires.Unix()))
	copy(body[9:25], cb.TaskID[:])
	var window int64
	if !cb.Window.IsZero() {
		window = cb.Window.Unix()
	}
	binary.BigEndian.PutUint64(body[25:33], uint64(window))
	binary.BigEndian.PutUint64(body[33:41], math.Float64bits(cb.USD))
	body = binary.AppendUvarint(body, uint64(cb.Seq))
	body = binary.AppendUvarint(body, uint64(cb.Tokens))
	for _, s := range []string{cb.Namespace, cb.Ref, cb.For} {
		body = binary.AppendUvarint(body, uint64(len(s)))
		body = append(body, s...)
	}
	return base64.RawURLEncoding.EncodeToString(append(body, budgetCallbackMAC(secret, body)...)), nil
}

// ParseBudgetCallbackToken checks token against secret and returns what
// it does. The MAC is compared in constant time before anything else is
// read; a token that fails is marked [ErrBadCallbackToken], one whose
// expiry is not after now [ErrCallbackExpired] too.
func ParseBudgetCallbackToken(secret []byte, token string, now time.Time) (BudgetCallback, error) {
	bad := func(why string) (BudgetCallback, error) {
		return BudgetCallback{}, errmark.Mark(errors.New("budget callback token: "+why), ErrBadCallbackToken)
	}
	if len(secret) < MinCallbackSecretBytes {
		return bad("no secret to check it with")
	}
	raw, ok := decodeCallbackToken(token)
	if !ok || len(raw) < budgetCallbackFixed+5+sha256.Size {
		return bad("malformed")
	}
	body, mac := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(mac, budgetCallbackMAC(secret, body)) {
		return bad("signature does not match")
	}
	if body[0] != budgetCallbackVersion {
		return bad("unknown version")
	}
	cb := BudgetCallback{Expires: time.Unix(int64(binary.BigEndian.Uint64(body[1:9])), 0).UTC()}
	copy(cb.TaskID[:], body[9:25])
	if w := int64(binary.BigEndian.Uint64(body[25:33])); w != 0 {
		cb.Window = time.Unix(w, 0).UTC()
	}
	cb.USD = math.Float64frombits(binary.BigEndian.Uint64(body[33:41]))
	rest := body[budgetCallbackFixed:]
	seq, n := binary.Uvarint(rest)
	if n <= 0 || seq < 1 || seq > math.MaxInt64 {
		return bad("malformed")
	}
	cb.Seq, rest = int64(seq), rest[n:]
	tokens, n := binary.Uvarint(rest)
	if n <= 0 || tokens > math.MaxInt64 {
		return bad("malformed")
	}
	cb.Tokens, rest = int64(tokens), rest[n:]
	for _, s := range []*string{&cb.Namespace, &cb.Ref, &cb.For} {
		if *s, rest, ok = callbackString(rest); !ok {
			return bad("malformed")
		}
	}
	if len(rest) != 0 {
		return bad("malformed")
	}
	if !now.Before(cb.Expires) {
		err := errors.Newf("budget callback token: expired at %s", cb.Expires.Format(time.RFC3339))
		return BudgetCallback{}, errmark.Mark(errmark.Mark(err, ErrCallbackExpired), ErrBadCallbackToken)
	}
	return cb, nil
}

func budgetCallbackMAC(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(budgetCallbackContext))
	m.Write(body)
	return m.Sum(nil)
}

// ErrNotWaitingOnBudget marks a task that does not wait on a budget now
// ([Client.BudgetCallback]).
var ErrNotWaitingOnBudget = errors.New("the task does not wait on a budget")

// BudgetCallback returns the link's content for the wait task id is in
// now over a budget (refused by it with BudgetWait): the budget, its
// window, the seq of the refusal, and as the raise's amounts what the
// refused step asked for (a raise by them lets the step run unless the
// window was overspent or others reserved meanwhile), valid until
// expires (at most 366 days off); forWhom, if set, is recorded with the
// raise. A task that does not wait on a budget is [ErrNotWaitingOnBudget];
// one not found [ErrNotFound]. Sign it with [BudgetCallbackToken] (or
// server.Server.BudgetCallbackURL).
func (c *Client) BudgetCallback(ctx context.Context, id uuid.UUID, expires time.Time, forWhom string) (BudgetCallback, error) {
	if expires.After(engine.Now().Add(store.MaxBudgetWaitTimeout)) {
		return BudgetCallback{}, errmark.Mark(errors.New("budget callback: expires more than 366 days off"), ErrInvalid)
	}
	events, err := store.TaskEvents(ctx, c.store.Engine(), c.namespace, id)
	if err != nil {
		return BudgetCallback{}, errors.Wrapf(err, "budget callback of task %s", id)
	}
	if len(events) == 0 {
		return BudgetCallback{}, errmark.Mark(errors.Newf("budget callback: no task %s", id), store.ErrNotFound)
	}
	w := openBudgetWait(events)
	if w == nil {
		return BudgetCallback{}, errmark.Mark(errors.Newf("budget callback: task %s does not wait on a budget", id), ErrNotWaitingOnBudget)
	}
	d := w.Data.(history.BudgetRefusedData)
	cb := BudgetCallback{Namespace: c.namespace, TaskID: id, Ref: d.Budget.Ref, Seq: w.Seq, USD: d.CostUSD, Tokens: d.Tokens, For: forWhom,
		Expires: expires.Truncate(time.Second)}
	if d.Budget.Window != nil {
		cb.Window = d.Budget.Window.UTC()
	}
	if cb.USD == 0 && cb.Tokens == 0 {
		cb.Tokens = 1 // a step that declared nothing is not refused; kept valid regardless
	}
	return cb, nil
}

// openBudgetWait is the budget_refused that began the wait over a budget
// the task is in, not raised since; nil when it is in none.
func openBudgetWait(events []history.Event) *history.Event {
	state, err := history.Replay(events)
	if err != nil || state.Status.Terminal() || state.BudgetWait == nil || state.BudgetWait.Raised {
		return nil
	}
	for i := len(events) - 1; i >= 0; i-- {
		if d, ok := events[i].Data.(history.BudgetRefusedData); ok && d.Action == history.BudgetWait {
			return &events[i]
		}
	}
	return nil
}

// BudgetCallbackState is where the wait a budget link raises stands.
type BudgetCallbackState struct {
	State       string         // CallbackOpen, CallbackUsed or CallbackEnded
	TaskType    string         // the task's type
	TypeVersion int            // and version
	Status      history.Status // the task's status
	Step        string         // the refused step's name
	Deadline    time.Time      // when the wait times out (CallbackOpen)
}

// budgetCallbackState reads where cb's wait stands from the task's
// events: open while the task waits in the wait cb names (begun at
// cb.Seq, not raised); used when a raise through a link came after it;
// ended otherwise (raised another way, timed out, the task finished or
// was refused again).
func budgetCallbackState(events []history.Event, cb BudgetCallback) BudgetCallbackState {
	st := BudgetCallbackState{State: CallbackEnded}
	if len(events) > 0 {
		if sc, ok := events[0].Data.(history.TaskScheduledData); ok {
			st.TaskType, st.TypeVersion = sc.TaskType, sc.TypeVersion
		}
	}
	if state, err := history.Replay(events); err == nil {
		st.Status = state.Status
	}
	for _, e := range events {
		if e.Seq == cb.Seq {
			if d, ok := e.Data.(history.BudgetRefusedData); ok {
				st.Step = d.Step
				if d.Deadline != nil {
					st.Deadline = *d.Deadline
				}
			}
		}
		if r, ok := e.Data.(history.BudgetRaisedData); ok && e.Seq > cb.Seq && r.Budget.Ref == cb.Ref &&
			(r.By == budgetCallbackBy || strings.HasPrefix(r.By, budgetCallbackBy+":")) {
			st.State = CallbackUsed
			return st
		}
	}
	if w := openBudgetWait(events); w != nil && w.Seq == cb.Seq && w.Data.(history.BudgetRefusedData).Budget.Ref == cb.Ref {
		st.State = CallbackOpen
	}
	return st
}

// BudgetCallbackWait reads, writing nothing, where the wait cb raises
// stands (a page about the link shows it before anyone decides). A task
// not found is [ErrNotFound].
func (c *Client) BudgetCallbackWait(ctx context.Context, cb BudgetCallback) (*BudgetCallbackState, error) {
	events, err := store.TaskEvents(ctx, c.store.Engine(), c.namespace, cb.TaskID)
	if err != nil {
		return nil, errors.Wrapf(err, "budget callback of task %s", cb.TaskID)
	}
	if len(events) == 0 {
		return nil, errmark.Mark(errors.Newf("budget callback: no task %s", cb.TaskID), store.ErrNotFound)
	}
	st := budgetCallbackState(events, cb)
	return &st, nil
}

// ErrCallbackUsed marks a budget link whose raise was made already.
var ErrCallbackUsed = errors.New("the callback link was used already")

// RaiseBudgetByCallback makes the raise of cb's link, once: in one
// transaction it locks the budget's window, checks the task still waits
// in the wait cb names (else [ErrCallbackUsed] when a link raised it,
// [ErrWaitEnded] otherwise; a task not found is [ErrNotFound]) and
// raises the window by cb's amounts as [Client.RaiseBudget] does, waking
// every task waiting on it; the ledger's by is cb.By(), its reason
// reason (or "callback link"). Concurrent uses of one link serialize on
// the window's lock: one raises, the others find it used.
func (c *Client) RaiseBudgetByCallback(ctx context.Context, cb BudgetCallback, reason string) ([]uuid.UUID, error) {
	if len(reason) > maxKeyLen || !validText(reason) {
		return nil, errmark.Mark(errors.Newf("budget callback: the reason is over %d bytes or not text", maxKeyLen), ErrInvalid)
	}
	if reason == "" {
		reason = "callback link"
	}
	b, err := c.budgetOf(ctx, cb.Ref)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errmark.Mark(errors.Wrap(err, "budget callback: the budget is gone"), ErrWaitEnded)
		}
		return nil, err
	}
	b.Key.Start = cb.Window // the window the task waits on
	tx, err := c.store.Engine().Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: c.namespace, Windows: []store.BudgetWindowLimit{
		{Key: b.Key, LimitUSD: b.LimitUSD, LimitTokens: b.LimitTokens},
	}}); err != nil {
		return nil, err
	}
	events, err := store.TaskEvents(ctx, tx, c.namespace, cb.TaskID)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, errmark.Mark(errors.Newf("budget callback: no task %s", cb.TaskID), store.ErrNotFound)
	}
	switch budgetCallbackState(events, cb).State {
	case CallbackUsed:
		return nil, errmark.Mark(errors.New("budget callback: the link was used already"), ErrCallbackUsed)
	case CallbackEnded:
		return nil, errmark.Mark(errors.New("budget callback: the wait the link raises has ended"), ErrWaitEnded)
	}
	res, err := engine.RaiseBudget(ctx, tx, &engine.RaiseParams{Namespace: c.namespace, Budget: b, USD: cb.USD, Tokens: cb.Tokens,
		By: cb.By(), Reason: reason, At: engine.Now()})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(res.Woken, cb.TaskID) {
		// Checked under the lock, so not expected: refuse rather than
		// raise for nobody.
		return nil, errmark.Mark(errors.New("budget callback: the task no longer waits on the budget"), ErrWaitEnded)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return res.Woken, nil
}
