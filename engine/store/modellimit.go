package store

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// Model rate limits (issue 38): a namespace limits the tokens and the
// requests per minute of a model, or of a provider key (the name a step's
// Spend.Model gives), for every worker on the database. Before a step
// that declares a Spend naming a limited model runs, its worker asks
// [Executor.ModelAdmit]: the step is admitted when what was admitted in
// the sliding window of the last [ModelLimitWindow] (by the store's
// clock) plus its ask fits, and it is its turn; otherwise it holds a
// waiting ticket and asks again when woken (Notification.Models) or at
// the time the answer names. Turns go round robin across fairness keys
// and first come, first served within one. Once the step ran,
// [Executor.ModelSettle] replaces its reservation by the tokens it spent.
// None of it is part of a task's history.

// ModelLimitWindow is the length of a model limit's sliding window: an
// admission at t counts in the window of every time in [t, t+60s).
const ModelLimitWindow = time.Minute

// Bounds of model limits, checked by every store.
const (
	// MaxModelTokensPerMinute bounds a limit's tokens per minute, and a
	// step's ask: 10^12.
	MaxModelTokensPerMinute = 1_000_000_000_000
	// MaxModelRequestsPerMinute bounds a limit's requests per minute:
	// 10^7.
	MaxModelRequestsPerMinute = 10_000_000
	// MaxModelLimits bounds the limits of one namespace: 1,000.
	MaxModelLimits = 1000
	// MinModelTicketTTL and MaxModelTicketTTL bound how long a waiting
	// ticket lives unless its worker asks again: 10ms to 10 minutes.
	MinModelTicketTTL = 10 * time.Millisecond
	MaxModelTicketTTL = 10 * time.Minute
	// MaxModelOwnerBytes bounds an owner's (a worker id's) and a
	// fairness key's length: 1,000 bytes.
	MaxModelOwnerBytes = 1000
	// MaxModelAdmissionRemove bounds [ModelAdmissionRemoveOldParams.Max]:
	// 10,000.
	MaxModelAdmissionRemove = 10_000
)

// The states of an admission.
const (
	ModelReserved = "reserved"
	ModelSettled  = "settled"
)

// ModelKey names a model's limit: its namespace and model.
type ModelKey struct {
	Namespace string
	Model     string
}

// ModelLimit is a model's limit in a namespace. A zero rate does not
// limit its dimension; at least one is set.
type ModelLimit struct {
	Namespace         string
	Model             string
	TokensPerMinute   int64
	RequestsPerMinute int64
	UpdatedAt         time.Time
}

// ModelFits reports whether an ask of tokens (and one request) fits a
// window that holds usedTokens and usedRequests under limit l: within
// each rate set. An ask over the whole tokens rate fits an empty window
// only (it goes alone), so it waits rather than never running.
func ModelFits(l ModelLimit, usedTokens, usedRequests, ask int64) bool {
	if l.RequestsPerMinute > 0 && usedRequests+1 > l.RequestsPerMinute {
		return false
	}
	return l.TokensPerMinute == 0 || usedTokens+ask <= l.TokensPerMinute || usedTokens == 0
}

// ModelTicketRound is the round of a new waiting ticket of a fairness
// key: one past the key's last waiting ticket (keyLast, 0: none), and not
// behind served, the round admitted last. Tickets take turns by round,
// then by creation: so keys take turns round robin, and a key's own
// tickets go first come, first served.
func ModelTicketRound(served, keyLast int64) int64 { return max(served, keyLast+1) }

func validModel(model string) bool {
	return model != "" && len(model) <= history.MaxSpendModelBytes && validText(model)
}

// ModelLimitSetParams set (make or replace) a model's limit
// ([Executor.ModelLimitSet]); waiters of the model hear of it. A
// namespace holds at most [MaxModelLimits]: a new model past them is
// refused with an error marked [ErrConflict] that says so.
type ModelLimitSetParams struct {
	Namespace string
	// Model: 1 to history.MaxSpendModelBytes bytes of UTF-8 without NUL.
	Model string
	// TokensPerMinute: 0 (no limit on tokens) to
	// [MaxModelTokensPerMinute]. RequestsPerMinute: 0 (none) to
	// [MaxModelRequestsPerMinute]. At least one is above 0.
	TokensPerMinute   int64
	RequestsPerMinute int64
}

// Validate checks the parameters: what every store does first.
func (p *ModelLimitSetParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("set model limit: namespace is required")
	case !validModel(p.Model):
		return errors.Newf("set model limit: a model is 1 to %d bytes of UTF-8 without NUL", history.MaxSpendModelBytes)
	case p.TokensPerMinute < 0 || p.TokensPerMinute > MaxModelTokensPerMinute:
		return errors.Newf("set model limit %s: tokens per minute %d is outside 0..%d", p.Model, p.TokensPerMinute, int64(MaxModelTokensPerMinute))
	case p.RequestsPerMinute < 0 || p.RequestsPerMinute > MaxModelRequestsPerMinute:
		return errors.Newf("set model limit %s: requests per minute %d is outside 0..%d", p.Model, p.RequestsPerMinute, MaxModelRequestsPerMinute)
	case p.TokensPerMinute == 0 && p.RequestsPerMinute == 0:
		return errors.Newf("set model limit %s: set tokens per minute, requests per minute or both", p.Model)
	}
	return nil
}

// ModelLimitListParams list a namespace's limits, by model
// ([Executor.ModelLimitList]).
type ModelLimitListParams struct {
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *ModelLimitListParams) Validate() error {
	if p == nil || p.Namespace == "" {
		return errors.New("list model limits: namespace is required")
	}
	return nil
}

// ModelLimitDeleteParams delete a model's limit and its waiting tickets
// ([Executor.ModelLimitDelete]): its waiters, woken, run unlimited. None
// is [ErrNotFound].
type ModelLimitDeleteParams struct {
	Namespace string
	Model     string
}

// Validate checks the parameters: what every store does first.
func (p *ModelLimitDeleteParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("delete model limit: namespace is required")
	case !validModel(p.Model):
		return errors.Newf("delete model limit: a model is 1 to %d bytes of UTF-8 without NUL", history.MaxSpendModelBytes)
	}
	return nil
}

// ModelAdmitParams ask for a step's admission under its model's limit
// ([Executor.ModelAdmit]). In one transaction, the store locks the
// model's limit, removes the model's tickets past their expiry, and
// admits the step when the window's use plus Tokens fits
// ([ModelFits]) and no other ticket is ahead of Ticket's (a caller
// without a ticket yet is behind every ticket): the ticket, if any, is
// gone and an admission of id Ticket records the ask. Otherwise the
// ticket is made (its round by [ModelTicketRound]) or kept, its expiry
// renewed to TicketTTL from now. Without a limit on the model nothing is
// written.
type ModelAdmitParams struct {
	Namespace string
	Model     string
	// Ticket is the caller's id of its ask: the waiting ticket's while
	// it waits, the admission's once admitted. The caller keeps it across
	// its asks.
	Ticket      uuid.UUID
	TaskID      uuid.UUID
	Position    int    // the step's position in its task
	FairnessKey string // the task's; "" is a key as any other
	Owner       string // the asking worker
	// Tokens is the ask: 0 to [MaxModelTokensPerMinute].
	Tokens int64
	// TicketTTL is how long the ticket waits for its worker to ask again
	// before it is dropped: [MinModelTicketTTL] to [MaxModelTicketTTL].
	// A worker that dies holds up the tickets behind its own this long
	// at most.
	TicketTTL time.Duration
	// Now, when set, is the time of the ask in place of the store's
	// clock: for tests. Production leaves it zero.
	Now time.Time
}

// Validate checks the parameters: what every store does first.
func (p *ModelAdmitParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "" || p.Ticket == uuid.Nil || p.TaskID == uuid.Nil || p.Owner == "":
		return errors.New("admit model step: namespace, ticket, task and owner are required")
	case !validModel(p.Model):
		return errors.Newf("admit model step: a model is 1 to %d bytes of UTF-8 without NUL", history.MaxSpendModelBytes)
	case p.Tokens < 0 || p.Tokens > MaxModelTokensPerMinute:
		return errors.Newf("admit model step: tokens %d is outside 0..%d", p.Tokens, int64(MaxModelTokensPerMinute))
	case p.Position < 0:
		return errors.Newf("admit model step: position %d is negative", p.Position)
	case len(p.Owner) > MaxModelOwnerBytes || len(p.FairnessKey) > MaxModelOwnerBytes || !validText(p.Owner) || !validText(p.FairnessKey):
		return errors.Newf("admit model step: owner and fairness key are at most %d bytes of UTF-8 without NUL", MaxModelOwnerBytes)
	case p.TicketTTL < MinModelTicketTTL || p.TicketTTL > MaxModelTicketTTL:
		return errors.Newf("admit model step: ticket TTL %s is outside %s..%s", p.TicketTTL, MinModelTicketTTL, MaxModelTicketTTL)
	}
	return nil
}

// ModelAdmission is [Executor.ModelAdmit]'s answer.
type ModelAdmission struct {
	// Limited is false when the model has no limit in the namespace:
	// the step runs, and nothing was written.
	Limited bool
	// Admitted: the step may run; its admission's id is the ticket's.
	Admitted bool
	// Limit is the model's limit (when Limited).
	Limit ModelLimit
	// UsedTokens and UsedRequests are the window's use before the ask.
	UsedTokens   int64
	UsedRequests int64
	// Ahead counts the tickets before the caller's (waiting).
	Ahead int
	// RetryAt, for the ticket first in turn, is when enough of the
	// window will have slid out for its ask to fit, if nothing settles
	// lower meanwhile; zero otherwise: wait to be woken.
	RetryAt time.Time
}

// ModelSettleParams replace an admission's reservation by what its step
// spent ([Executor.ModelSettle]): Tokens. An admission settled already,
// or removed, is [ErrNotFound]. Waiters of the model hear of it when
// it frees tokens.
type ModelSettleParams struct {
	Namespace string
	Admission uuid.UUID
	// Tokens: 0 to [MaxModelTokensPerMinute].
	Tokens int64
}

// Validate checks the parameters: what every store does first.
func (p *ModelSettleParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "" || p.Admission == uuid.Nil:
		return errors.New("settle model admission: namespace and admission are required")
	case p.Tokens < 0 || p.Tokens > MaxModelTokensPerMinute:
		return errors.Newf("settle model admission %s: tokens %d is outside 0..%d", p.Admission, p.Tokens, int64(MaxModelTokensPerMinute))
	}
	return nil
}

// ModelTicketDropParams drop a waiting ticket ([Executor.ModelTicketDrop]):
// its step stopped waiting. None (admitted, expired) is not an error;
// waiters of the model hear of a drop.
type ModelTicketDropParams struct {
	Namespace string
	Ticket    uuid.UUID
}

// Validate checks the parameters: what every store does first.
func (p *ModelTicketDropParams) Validate() error {
	if p == nil || p.Namespace == "" || p.Ticket == uuid.Nil {
		return errors.New("drop model ticket: namespace and ticket are required")
	}
	return nil
}

// ModelAdmissionRemoveOldParams remove, in every namespace, up to Max
// admissions made more than Keep ago by the store's clock
// ([Executor.ModelAdmissionRemoveOld]), and tickets expired as long.
type ModelAdmissionRemoveOldParams struct {
	// Keep: at least [ModelLimitWindow], so no admission still in its
	// window goes.
	Keep time.Duration
	// Max: 1 to [MaxModelAdmissionRemove].
	Max int
}

// Validate checks the parameters: what every store does first.
func (p *ModelAdmissionRemoveOldParams) Validate() error {
	switch {
	case p == nil || p.Keep < ModelLimitWindow:
		return errors.Newf("remove model admissions: keep must be at least the window, %s", ModelLimitWindow)
	case p.Max < 1 || p.Max > MaxModelAdmissionRemove:
		return errors.Newf("remove model admissions: max %d is outside 1..%d", p.Max, MaxModelAdmissionRemove)
	}
	return nil
}
