package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// Budgets (issue 38): what tasks may spend on AI models. A scope budget
// (a namespace's, a fairness key's, a type's) is defined per window and
// kept in budgets; a task's budget is defined in its task_scheduled. What
// each budget has spent and holds reserved is counted per window in
// budget_windows (a task budget has one window, starting at the zero
// time), and each open reservation is a row of budget_reservations. The
// decisions (which budgets apply, whether a step fits) are made above the
// seam, in engine/internal/requests, over a Tx: these are statements.

// The bounds of a scope budget's window ([BudgetDef.Window]).
const (
	MinBudgetWindow = time.Minute
	MaxBudgetWindow = 366 * 24 * time.Hour
	// DefaultBudgetWaitTimeout is how long a task over a budget that waits
	// waits for a raise, unless the budget says otherwise; at most
	// MaxBudgetWaitTimeout.
	DefaultBudgetWaitTimeout = 24 * time.Hour
	MaxBudgetWaitTimeout     = 366 * 24 * time.Hour
	// MaxBudgetsPerStep bounds the budgets one reservation takes (a
	// task's own, its ancestors', and three scopes): a tree deeper than
	// this inherits only its nearest ancestors' budgets.
	MaxBudgetsPerStep = 32
	// MaxBudgets bounds the scope budgets of one namespace: 1,000 (every
	// worker reads them all each second; a gauge reports each).
	MaxBudgets = 1000
)

// BudgetDef defines a scope budget: Ref ("namespace", "fairness_key:<key>"
// or "type:<name>"), at most USD dollars and Tokens tokens per Window (0
// in a unit: no limit in it), and what happens at the limit.
type BudgetDef struct {
	Ref         string
	USD         float64
	Tokens      int64
	Window      time.Duration
	OnExhausted string        // history.BudgetFail ("" too) or history.BudgetWait
	WaitTimeout time.Duration // 0: DefaultBudgetWaitTimeout
	UpdatedAt   time.Time     // when it was last set; not read by BudgetSet
}

// Validate reports what is wrong with d as a scope budget.
func (d BudgetDef) Validate() error {
	if err := history.ValidBudgetRef(d.Ref); err != nil {
		return err
	}
	if strings.HasPrefix(d.Ref, history.BudgetRefTaskPrefix) {
		return errors.Newf("budget %q: a task's budget is set when it starts, not as a scope budget", d.Ref)
	}
	if d.Window < MinBudgetWindow || d.Window > MaxBudgetWindow || d.Window%time.Second != 0 {
		return errors.Newf("budget %q: window %s is outside %s..%s (whole seconds)", d.Ref, d.Window, MinBudgetWindow, MaxBudgetWindow)
	}
	if err := history.ValidBudgetLimits(d.USD, d.Tokens); err != nil {
		return errors.Wrapf(err, "budget %q", d.Ref)
	}
	return errors.Wrapf(history.TaskBudget{USD: d.USD, Tokens: d.Tokens, OnExhausted: d.OnExhausted,
		WaitTimeoutMillis: d.WaitTimeout.Milliseconds()}.Validate(), "budget %q", d.Ref)
}

// WindowStart returns the start of the window of d holding at: windows
// are aligned to the Unix epoch in UTC (an hour's resets on the hour, a
// day's at midnight UTC).
func (d BudgetDef) WindowStart(at time.Time) time.Time {
	return BudgetWindowStart(d.Window, at)
}

// BudgetWindowStart is [BudgetDef.WindowStart] of a window of length w;
// the zero time for w <= 0 (a task budget's one window).
func BudgetWindowStart(w time.Duration, at time.Time) time.Time {
	if w <= 0 {
		return time.Time{}
	}
	sec := int64(w / time.Second)
	u := at.Unix()
	start := u - u%sec
	if u < 0 && u%sec != 0 {
		start -= sec
	}
	return time.Unix(start, 0).UTC()
}

// BudgetSetParams sets (creates or replaces) a scope budget of a
// namespace ([Executor.BudgetSet]). What its windows have spent stays. A
// namespace holds at most [MaxBudgets]: a new budget past them is refused
// with an error marked [ErrConflict] that says so.
type BudgetSetParams struct {
	Namespace string
	Budget    BudgetDef
}

// Validate checks the parameters: what every store does first.
func (p *BudgetSetParams) Validate() error {
	if err := namespaceRequired("set budget", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	return p.Budget.Validate()
}

// BudgetListParams lists a namespace's scope budgets, by ref
// ([Executor.BudgetList]).
type BudgetListParams struct {
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *BudgetListParams) Validate() error {
	return namespaceRequired("list budgets", p == nil || p.Namespace == "")
}

// BudgetDeleteParams removes a scope budget ([Executor.BudgetDelete]):
// an unknown one is [ErrNotFound]. Its windows' counts stay (what was
// spent was spent), and a budget set again later counts on from them.
type BudgetDeleteParams struct {
	Namespace string
	Ref       string
}

// Validate checks the parameters: what every store does first.
func (p *BudgetDeleteParams) Validate() error {
	if err := namespaceRequired("delete budget", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	return history.ValidBudgetRef(p.Ref)
}

// BudgetWindowKey names one window of a budget: Start is the zero time
// for a task budget.
type BudgetWindowKey struct {
	Ref   string
	Start time.Time
}

// Compare orders keys by ref, then start: the order windows are locked
// in, so that two reservations never wait on each other.
func (k BudgetWindowKey) Compare(o BudgetWindowKey) int {
	if c := strings.Compare(k.Ref, o.Ref); c != 0 {
		return c
	}
	return k.Start.Compare(o.Start)
}

// History returns the key as the ledger names it.
func (k BudgetWindowKey) History() history.BudgetWindowRef {
	r := history.BudgetWindowRef{Ref: k.Ref}
	if !k.Start.IsZero() {
		start := k.Start.UTC()
		r.Window = &start
	}
	return r
}

// BudgetWindow is what a window of a budget holds: its limits (the
// budget's, as last locked with), what raises added to them, what was
// spent and what is reserved.
type BudgetWindow struct {
	Key            BudgetWindowKey
	LimitUSD       float64
	LimitTokens    int64
	RaisedUSD      float64
	RaisedTokens   int64
	SpentUSD       float64
	SpentTokens    int64
	ReservedUSD    float64
	ReservedTokens int64
	UpdatedAt      time.Time
}

// Fits reports whether reserving usd and tokens keeps w within its
// limits, raises included; a unit with no limit (0) always fits.
func (w BudgetWindow) Fits(usd float64, tokens int64) bool {
	if w.LimitUSD > 0 && w.SpentUSD+w.ReservedUSD+usd > w.LimitUSD+w.RaisedUSD+1e-9 {
		return false
	}
	if w.LimitTokens > 0 && w.SpentTokens+w.ReservedTokens+tokens > w.LimitTokens+w.RaisedTokens {
		return false
	}
	return true
}

// BudgetWindowLimit is a window to lock, with the limits of its budget:
// a window not written yet is inserted with them, and one written takes
// them (a scope budget's limits may have changed since).
type BudgetWindowLimit struct {
	Key         BudgetWindowKey
	LimitUSD    float64
	LimitTokens int64
}

// BudgetWindowLockParams locks windows of a namespace's budgets for the
// rest of the transaction ([Executor.BudgetWindowLock]), inserting those
// not written yet, and reads them. The store locks them in key order
// (see [BudgetWindowKey.Compare]): callers in a Tx reserve against
// several budgets without waiting on each other in a cycle.
type BudgetWindowLockParams struct {
	Namespace string
	Windows   []BudgetWindowLimit
}

// Validate checks the parameters: what every store does first.
func (p *BudgetWindowLockParams) Validate() error {
	if err := namespaceRequired("lock budget windows", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	if len(p.Windows) == 0 || len(p.Windows) > MaxBudgetsPerStep {
		return errors.Newf("lock budget windows: %d windows, 1..%d allowed", len(p.Windows), MaxBudgetsPerStep)
	}
	for _, w := range p.Windows {
		if err := history.ValidBudgetRef(w.Key.Ref); err != nil {
			return err
		}
		if w.LimitUSD < 0 || w.LimitTokens < 0 || w.LimitUSD != w.LimitUSD {
			return errors.Newf("lock budget windows: budget %q with negative limits", w.Key.Ref)
		}
	}
	return nil
}

// Sorted returns the windows in key order, without repeats.
func (p *BudgetWindowLockParams) Sorted() []BudgetWindowLimit {
	ws := slices.Clone(p.Windows)
	slices.SortFunc(ws, func(a, b BudgetWindowLimit) int { return a.Key.Compare(b.Key) })
	return slices.CompactFunc(ws, func(a, b BudgetWindowLimit) bool { return a.Key.Compare(b.Key) == 0 })
}

// BudgetWindowListParams reads windows of a namespace's budgets
// ([Executor.BudgetWindowList]) without locking them; a window never
// written is left out.
type BudgetWindowListParams struct {
	Namespace string
	Keys      []BudgetWindowKey
}

// Validate checks the parameters: what every store does first.
func (p *BudgetWindowListParams) Validate() error {
	if err := namespaceRequired("list budget windows", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	if len(p.Keys) > 1000 {
		return errors.Newf("list budget windows: %d keys, at most 1000", len(p.Keys))
	}
	return nil
}

// BudgetWindowDelta is what to add to a window's counts (negative to
// take away): spent, reserved, raised.
type BudgetWindowDelta struct {
	Key            BudgetWindowKey
	SpentUSD       float64
	SpentTokens    int64
	ReservedUSD    float64
	ReservedTokens int64
	RaisedUSD      float64
	RaisedTokens   int64
}

// BudgetWindowAddParams adds to windows' counts ([Executor.BudgetWindowAdd]);
// a window not written is [ErrNotFound] (lock it first). A reserved
// count never goes below 0.
type BudgetWindowAddParams struct {
	Namespace string
	Deltas    []BudgetWindowDelta
}

// Validate checks the parameters: what every store does first.
func (p *BudgetWindowAddParams) Validate() error {
	if err := namespaceRequired("add to budget windows", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	if len(p.Deltas) > MaxBudgetsPerStep {
		return errors.Newf("add to budget windows: %d windows, at most %d", len(p.Deltas), MaxBudgetsPerStep)
	}
	return nil
}

// BudgetReservationEntry is a reservation's part in one window.
type BudgetReservationEntry struct {
	Key    BudgetWindowKey
	USD    float64
	Tokens int64
}

// BudgetReservationInsertParams records an open reservation of a task's
// step: the attempt and position it is for, and what it holds in each
// window ([Executor.BudgetReservationInsert]). One already recorded for
// the attempt and position is [ErrConflict].
type BudgetReservationInsertParams struct {
	Namespace string
	TaskID    uuid.UUID
	Attempt   int
	Position  int
	Entries   []BudgetReservationEntry
}

// Validate checks the parameters: what every store does first.
func (p *BudgetReservationInsertParams) Validate() error {
	if err := namespaceRequired("insert budget reservation", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	if len(p.Entries) == 0 || len(p.Entries) > MaxBudgetsPerStep {
		return errors.Newf("insert budget reservation: %d entries, 1..%d allowed", len(p.Entries), MaxBudgetsPerStep)
	}
	return nil
}

// BudgetReservationDeleteParams removes a task's open reservation of an
// attempt's step and returns what it held ([Executor.BudgetReservationDelete]):
// none when there is none (settled already).
type BudgetReservationDeleteParams struct {
	TaskID   uuid.UUID
	Attempt  int
	Position int
}

// Validate checks the parameters: what every store does first.
func (p *BudgetReservationDeleteParams) Validate() error {
	if p == nil || p.TaskID == uuid.Nil {
		return errors.New("delete budget reservation: no task id")
	}
	return nil
}

// BudgetWaitParams records, or takes, the tasks waiting on windows of
// budgets: a task over a budget that waits is recorded
// ([Executor.BudgetWaitInsert]) in the transaction of its refusal; a
// raise takes (removes and returns) the tasks waiting on the window it
// raised ([Executor.BudgetWaitTake], Key only).
type BudgetWaitParams struct {
	Namespace string
	Key       BudgetWindowKey
	TaskID    uuid.UUID
}

// Validate checks the parameters: what every store does first.
func (p *BudgetWaitParams) Validate() error {
	if err := namespaceRequired("budget wait", p == nil || p.Namespace == ""); err != nil {
		return err
	}
	return history.ValidBudgetRef(p.Key.Ref)
}

// budgetExecutor is the part of [Executor] that keeps budgets.
type budgetExecutor interface {
	// BudgetSet, BudgetList and BudgetDelete keep a namespace's scope
	// budgets' definitions.
	BudgetSet(ctx context.Context, p *BudgetSetParams) error
	BudgetList(ctx context.Context, p *BudgetListParams) ([]BudgetDef, error)
	BudgetDelete(ctx context.Context, p *BudgetDeleteParams) error
	// BudgetWindowLock inserts the windows of p not written yet, sets
	// the limits of all, locks them until the transaction ends and
	// returns them in key order. BudgetWindowList reads windows
	// unlocked. BudgetWindowAdd adds to their counts.
	BudgetWindowLock(ctx context.Context, p *BudgetWindowLockParams) ([]BudgetWindow, error)
	BudgetWindowList(ctx context.Context, p *BudgetWindowListParams) ([]BudgetWindow, error)
	BudgetWindowAdd(ctx context.Context, p *BudgetWindowAddParams) error
	// BudgetReservationInsert and BudgetReservationDelete keep the open
	// reservations of tasks' steps.
	BudgetReservationInsert(ctx context.Context, p *BudgetReservationInsertParams) error
	BudgetReservationDelete(ctx context.Context, p *BudgetReservationDeleteParams) ([]BudgetReservationEntry, error)
	// BudgetWaitInsert records a task waiting on a window (again: no
	// error); BudgetWaitTake removes the tasks waiting on p.Key and
	// returns their ids, in no particular order.
	BudgetWaitInsert(ctx context.Context, p *BudgetWaitParams) error
	BudgetWaitTake(ctx context.Context, p *BudgetWaitParams) ([]uuid.UUID, error)
}
