package history

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Budgets (issue 38): what a task may spend on AI models, in tokens and
// US dollars. A task's own budget and the budgets it inherits from its
// ancestors are in its task_scheduled; scope budgets (a namespace, a
// fairness key, a type; per window) are kept by the store. Every
// reservation, settlement, refusal and raise is an event of the task's
// log: the ledger.

// What a budget does when a step would take it past its limit.
const (
	BudgetFail = "fail" // the task fails permanently (kind budget_exhausted); the default
	BudgetWait = "wait" // the task waits, holding no worker slot, for a raise or its timeout
)

// BudgetAction is what a budget whose OnExhausted is action does at its
// limit: action, or BudgetFail when it is unset.
func BudgetAction(action string) string {
	if action == "" {
		return BudgetFail
	}
	return action
}

// The budget references a ledger event names: a task's budget, the
// namespace's, a fairness key's (a tenant), a type's.
const (
	BudgetRefNamespace   = "namespace"
	BudgetRefTaskPrefix  = "task:"
	BudgetRefKeyPrefix   = "fairness_key:"
	BudgetRefTypePrefix  = "type:"
	maxBudgetRefBytes    = 600
	maxBudgetWaitTimeout = 366 * 24 * time.Hour
)

// ValidBudgetRef returns why ref cannot name a budget, or nil: one of
// "namespace", "task:<id>", "fairness_key:<key>", "type:<name>", each
// with a non-empty name, at most 600 bytes.
func ValidBudgetRef(ref string) error {
	switch {
	case ref == BudgetRefNamespace:
		return nil
	case len(ref) > maxBudgetRefBytes:
		return errors.Newf("budget %q: a reference of %d bytes is over the limit of %d", ref, len(ref), maxBudgetRefBytes)
	}
	for _, prefix := range []string{BudgetRefTaskPrefix, BudgetRefKeyPrefix, BudgetRefTypePrefix} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			if name == "" {
				return errors.Newf("budget %q: no name after %q", ref, prefix)
			}
			return nil
		}
	}
	return errors.Newf("budget %q: not one of namespace, task:<id>, fairness_key:<key>, type:<name>", ref)
}

// TaskBudget is a budget on a task and, inherited, on its descendants
// (task_scheduled): at most USD dollars and Tokens tokens (input and
// output together) over the task's life; 0 in a unit does not limit it.
// Ref names the task that set it ("task:<id>"); it is empty for a task's
// own budget, whose reference is its own id.
type TaskBudget struct {
	Ref         string  `json:"ref,omitempty"`
	USD         float64 `json:"usd,omitempty"`
	Tokens      int64   `json:"tokens,omitempty"`
	OnExhausted string  `json:"on_exhausted,omitempty"` // BudgetFail (empty) or BudgetWait
	// WaitTimeoutMillis bounds a wait of BudgetWait; 0 is the default.
	WaitTimeoutMillis int64 `json:"wait_timeout_ms,omitempty"`
}

// Validate reports what is wrong with b: amounts negative or not finite,
// neither set, an unknown action, a wait timeout outside 0..366 days.
func (b TaskBudget) Validate() error {
	if err := ValidBudgetLimits(b.USD, b.Tokens); err != nil {
		return err
	}
	if b.Ref != "" && !strings.HasPrefix(b.Ref, BudgetRefTaskPrefix) {
		return errors.Newf("task budget: reference %q is not task:<id>", b.Ref)
	}
	return validBudgetAction(b.OnExhausted, time.Duration(b.WaitTimeoutMillis)*time.Millisecond)
}

// ValidBudgetLimits reports what is wrong with a budget's amounts: each
// finite and not negative, at least one above 0.
func ValidBudgetLimits(usd float64, tokens int64) error {
	switch {
	case math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0:
		return errors.Newf("budget: USD %v is not a finite number >= 0", usd)
	case tokens < 0:
		return errors.Newf("budget: Tokens %d is negative", tokens)
	case usd == 0 && tokens == 0:
		return errors.New("budget: limits nothing (set USD, Tokens or both)")
	}
	return nil
}

func validBudgetAction(action string, timeout time.Duration) error {
	switch {
	case action != "" && action != BudgetFail && action != BudgetWait:
		return errors.Newf("budget: OnExhausted %q is not %q or %q", action, BudgetFail, BudgetWait)
	case timeout < 0 || timeout > maxBudgetWaitTimeout:
		return errors.Newf("budget: WaitTimeout %s is outside 0..%s", timeout, maxBudgetWaitTimeout)
	case timeout != 0 && action != BudgetWait:
		return errors.Newf("budget: WaitTimeout %s without OnExhausted %q", timeout, BudgetWait)
	}
	return nil
}

// BudgetWindowRef names one window of a budget in the ledger: Ref, and
// for a scope budget with a window the window's start (Window nil for a
// task budget, which has none).
type BudgetWindowRef struct {
	Ref    string     `json:"ref"`
	Window *time.Time `json:"window,omitempty"`
}

// String is the ref, with "@<window start>" for a windowed one.
func (r BudgetWindowRef) String() string {
	if r.Window == nil {
		return r.Ref
	}
	return r.Ref + "@" + r.Window.UTC().Format(time.RFC3339)
}

// BudgetReservedData is the payload of budget_reserved: before the step
// at Position (Step) ran, its declared spend (Tokens, CostUSD) was
// reserved against every budget of Budgets, atomically. The attempt that
// writes it settles it (budget_settled) once the step has run, or the
// rescuer does when its lease expires first.
type BudgetReservedData struct {
	Position int               `json:"position"`
	Step     string            `json:"step"`
	Budgets  []BudgetWindowRef `json:"budgets"`
	Tokens   int64             `json:"tokens,omitempty"`
	CostUSD  float64           `json:"cost_usd,omitempty"`
}

// Why a budget_settled settles.
const (
	SettleStepCompleted = "step_completed" // the step ran and returned
	SettleStepFailed    = "step_failed"    // the step ran and failed
	SettleReleased      = "released"       // the step never ran (a later gate refused it)
	SettleLeaseExpired  = "lease_expired"  // the rescuer found the attempt's lease expired
	SettleAttemptEnded  = "attempt_ended"  // the attempt ended with it open (its settle failed): charged whole
)

// BudgetSettledData is the payload of budget_settled: what the step at
// Position spent (Tokens, CostUSD) was charged to Budgets, and its
// reservation there (ReservedTokens, ReservedUSD; none when Reserved is
// false: a step that declared no spend is charged after it ran) given
// back. Reason is one of the Settle* constants.
type BudgetSettledData struct {
	Position       int               `json:"position"`
	Step           string            `json:"step"`
	Reason         string            `json:"reason"`
	Budgets        []BudgetWindowRef `json:"budgets"`
	Reserved       bool              `json:"reserved,omitempty"`
	ReservedTokens int64             `json:"reserved_tokens,omitempty"`
	ReservedUSD    float64           `json:"reserved_usd,omitempty"`
	Tokens         int64             `json:"tokens,omitempty"`
	CostUSD        float64           `json:"cost_usd,omitempty"`
}

// BudgetRefusedData is the payload of budget_refused: the step at
// Position (Step) did not start, as its spend (Tokens, CostUSD) would
// take Budget past its limit (LimitUSD, LimitTokens, raises included)
// with SpentUSD/SpentTokens spent and ReservedUSD/ReservedTokens held.
// Action is BudgetFail (the attempt's outcome fails the task, kind
// budget_exhausted) or BudgetWait: the attempt ends here, and the task
// waits, holding no worker slot, until a raise of the budget
// (budget_raised), the end of the budget's window (WindowEnd: it
// retries the step in the next), or Deadline, when it fails.
type BudgetRefusedData struct {
	Position       int             `json:"position"`
	Step           string          `json:"step"`
	Budget         BudgetWindowRef `json:"budget"`
	Action         string          `json:"action"`
	Tokens         int64           `json:"tokens,omitempty"`
	CostUSD        float64         `json:"cost_usd,omitempty"`
	LimitUSD       float64         `json:"limit_usd,omitempty"`
	LimitTokens    int64           `json:"limit_tokens,omitempty"`
	SpentUSD       float64         `json:"spent_usd,omitempty"`
	SpentTokens    int64           `json:"spent_tokens,omitempty"`
	ReservedUSD    float64         `json:"reserved_usd,omitempty"`
	ReservedTokens int64           `json:"reserved_tokens,omitempty"`
	Deadline       *time.Time      `json:"deadline,omitempty"`
	// WindowEnd, for a wait on a scope budget's window, is when that
	// window ends: the task is due again then (or at Deadline, if
	// sooner) and retries the step against the next window, which may
	// have room. Nil for a task's budget (it has no window) and in
	// events written before it was recorded.
	WindowEnd *time.Time `json:"window_end,omitempty"`
}

// BudgetRaisedData is the payload of budget_raised: By raised Budget by
// USD and Tokens, for Reason, to the limits LimitUSD and LimitTokens
// (raises included). It is written into the tasks that waited on the
// budget, which are due at once and retry the refused step.
type BudgetRaisedData struct {
	Budget      BudgetWindowRef `json:"budget"`
	By          string          `json:"by"`
	Reason      string          `json:"reason,omitempty"`
	USD         float64         `json:"usd,omitempty"`
	Tokens      int64           `json:"tokens,omitempty"`
	LimitUSD    float64         `json:"limit_usd,omitempty"`
	LimitTokens int64           `json:"limit_tokens,omitempty"`
}

// EventType implements [Payload].
func (BudgetReservedData) EventType() Type { return BudgetReserved }

// EventType implements [Payload].
func (BudgetSettledData) EventType() Type { return BudgetSettled }

// EventType implements [Payload].
func (BudgetRefusedData) EventType() Type { return BudgetRefused }

// EventType implements [Payload].
func (BudgetRaisedData) EventType() Type { return BudgetRaised }

// Reservation is a reservation the task holds (budget_reserved not yet
// settled): the attempt and step position it was made for, what it
// reserved, against which budgets.
type Reservation struct {
	Attempt  int
	Position int
	Step     string
	Budgets  []BudgetWindowRef
	Tokens   int64
	CostUSD  float64
}

// BudgetWaitState is the wait of a task over budget (budget_refused with
// BudgetWait): for a raise of one of Budgets at the step at Position, or
// until Deadline. Raised is set once a raise came (budget_raised): the
// task is due, and retries the step.
type BudgetWaitState struct {
	Position int
	Budgets  []BudgetWindowRef
	Deadline time.Time
	Raised   bool
}

// ReservationAt returns the open reservation of attempt at position, if
// any.
func (s State) ReservationAt(attempt, position int) (Reservation, bool) {
	for _, r := range s.Reservations {
		if r.Attempt == attempt && r.Position == position {
			return r, true
		}
	}
	return Reservation{}, false
}

func checkBudgetRefs(e Event, refs []BudgetWindowRef) error {
	if len(refs) == 0 {
		return invalidf(nil, "event %d (%s): names no budget", e.Seq, e.Data.EventType())
	}
	for _, r := range refs {
		if err := ValidBudgetRef(r.Ref); err != nil {
			return invalidf(err, "event %d (%s)", e.Seq, e.Data.EventType())
		}
	}
	return nil
}

func checkAmounts(e Event, tokens int64, usd float64) error {
	if tokens < 0 || math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 {
		return invalidf(nil, "event %d (%s): amounts %d tokens, %v USD", e.Seq, e.Data.EventType(), tokens, usd)
	}
	return nil
}

func (s *State) applyBudgetReserved(e Event, p BudgetReservedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if err := checkBudgetRefs(e, p.Budgets); err != nil {
		return err
	}
	if err := checkAmounts(e, p.Tokens, p.CostUSD); err != nil {
		return err
	}
	if p.Position < 0 {
		return invalidf(nil, "event %d (%s): position %d", e.Seq, BudgetReserved, p.Position)
	}
	if _, open := s.ReservationAt(e.Attempt, p.Position); open {
		return invalidf(nil, "event %d (%s): step %d already holds a reservation in attempt %d", e.Seq, BudgetReserved, p.Position, e.Attempt)
	}
	s.Reservations = append(slices.Clip(s.Reservations), Reservation{
		Attempt: e.Attempt, Position: p.Position, Step: p.Step, Budgets: p.Budgets, Tokens: p.Tokens, CostUSD: p.CostUSD,
	})
	if s.BudgetWait != nil && s.BudgetWait.Position == p.Position {
		s.BudgetWait = nil // the step it waited at goes on
	}
	return nil
}

func (s *State) applyBudgetSettled(e Event, p BudgetSettledData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch p.Reason {
	case SettleStepCompleted, SettleStepFailed, SettleReleased, SettleLeaseExpired, SettleAttemptEnded:
	default:
		return invalidf(nil, "event %d (%s): unknown reason %q", e.Seq, BudgetSettled, p.Reason)
	}
	if err := checkBudgetRefs(e, p.Budgets); err != nil {
		return err
	}
	if err := checkAmounts(e, p.Tokens, p.CostUSD); err != nil {
		return err
	}
	if !p.Reserved {
		return nil // a charge after an undeclared step: nothing was held
	}
	i := slices.IndexFunc(s.Reservations, func(r Reservation) bool { return r.Attempt == e.Attempt && r.Position == p.Position })
	if i < 0 {
		return invalidf(nil, "event %d (%s): step %d holds no reservation in attempt %d", e.Seq, BudgetSettled, p.Position, e.Attempt)
	}
	s.Reservations = slices.Delete(slices.Clone(s.Reservations), i, i+1)
	if len(s.Reservations) == 0 {
		s.Reservations = nil
	}
	return nil
}

func (s *State) applyBudgetRefused(e Event, p BudgetRefusedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if err := checkBudgetRefs(e, []BudgetWindowRef{p.Budget}); err != nil {
		return err
	}
	if err := checkAmounts(e, p.Tokens, p.CostUSD); err != nil {
		return err
	}
	switch p.Action {
	case BudgetFail:
		return nil // the attempt's outcome, in the same append, fails the task
	case BudgetWait:
	default:
		return invalidf(nil, "event %d (%s): unknown action %q", e.Seq, BudgetRefused, p.Action)
	}
	switch {
	case p.Deadline == nil:
		return invalidf(nil, "event %d (%s): a wait without a deadline", e.Seq, BudgetRefused)
	case s.Timer != nil || s.Wait != nil:
		return invalidf(nil, "event %d (%s): the task waits already", e.Seq, BudgetRefused)
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, BudgetRefused)
	case len(s.Reservations) > 0:
		return invalidf(nil, "event %d (%s): step %d's reservation is not settled", e.Seq, BudgetRefused, s.Reservations[0].Position)
	}
	// The attempt ends: the task waits, holding no lease, for a raise or
	// its deadline. Like a wait for a signal, it uses up nothing of the
	// retry budget.
	s.Released++
	s.Budget.Attempts--
	s.BudgetWait = &BudgetWaitState{Position: p.Position, Budgets: []BudgetWindowRef{p.Budget}, Deadline: *p.Deadline}
	s.Status = StatusPending
	s.RunAt = *p.Deadline
	if p.WindowEnd != nil && p.WindowEnd.Before(s.RunAt) {
		s.RunAt = *p.WindowEnd // the next window may have room
	}
	if d := s.Scheduled.Deadline; d != nil && d.Before(s.RunAt) {
		s.RunAt = *d // the task's own deadline ends the wait first
	}
	if s.CancelRequested {
		s.RunAt = e.At // a cancel came first: due at once, to compensate
	}
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	return nil
}

func (s *State) applyBudgetRaised(e Event, p BudgetRaisedData) error {
	if err := checkBudgetRefs(e, []BudgetWindowRef{p.Budget}); err != nil {
		return err
	}
	if p.By == "" {
		return invalidf(nil, "event %d (%s): no requester (by)", e.Seq, BudgetRaised)
	}
	if err := checkAmounts(e, p.Tokens, p.USD); err != nil {
		return err
	}
	w := s.BudgetWait
	if w == nil || w.Raised || !slices.ContainsFunc(w.Budgets, func(r BudgetWindowRef) bool { return r.Ref == p.Budget.Ref }) {
		return nil // on record; it wakes nothing
	}
	raised := *w
	raised.Raised = true
	s.BudgetWait = &raised
	if s.Status == StatusPending && e.At.Before(s.RunAt) {
		s.RunAt = e.At
	}
	return nil
}
