package sdk

import (
	"context"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk/internal/executor"
)

// Budget caps what tasks may spend on AI models, in US dollars and in
// tokens (input and output together): at most USD and at most Tokens (0
// in a unit: not limited in it; at least one must be set). Before a step
// that declares its spend (workflow.StepOpts.Spend) runs, the spend is
// reserved against every budget that applies to its task; a step that
// would take a budget past its limit does not start, and OnExhausted
// says what becomes of the task then. What the step reports
// (activities.RecordUsage) settles the reservation. See docs/budgets.md.
//
// On a task (StartOpts.Budget, WorkflowOpts.Budget) it covers the task
// and all its descendants over their lives, and Window must be 0. On a
// scope (Client.SetBudget) it is per Window, 1 minute to 366 days in
// whole seconds; windows are fixed and aligned to the Unix epoch in UTC
// (an hour's budget resets on the hour, a day's at midnight UTC).
type Budget struct {
	USD    float64
	Tokens int64
	Window time.Duration
	// OnExhausted is what happens to a task whose step a budget refuses:
	// BudgetFail (the default) or BudgetWait.
	OnExhausted BudgetAction
	// WaitTimeout bounds a wait of BudgetWait: a task not raised by then
	// fails (KindBudgetExhausted). Default 24 hours, at most 366 days.
	WaitTimeout time.Duration
}

// BudgetAction is what a budget does with a task whose step it refuses.
type BudgetAction string

// The budget actions.
const (
	// BudgetFail fails the task permanently, with the error kind
	// KindBudgetExhausted: dead-lettered (or failed, for a type that
	// skips dead letters), its compensable steps compensated, as any
	// permanent failure.
	BudgetFail BudgetAction = history.BudgetFail
	// BudgetWait makes the task wait for a person to raise the budget
	// (Client.RaiseBudget), holding no worker slot, up to WaitTimeout;
	// a raise makes it retry the refused step.
	BudgetWait BudgetAction = history.BudgetWait
)

// KindBudgetExhausted is the error kind (TaskError.Kind, the dead
// letters' evidence) of a task a budget stopped: a budget of BudgetFail
// refused a step, or a wait of BudgetWait timed out.
const KindBudgetExhausted = executor.KindBudgetExhausted

// taskBudget checks b as a task's budget and returns it as recorded.
func taskBudget(b *Budget) (*history.TaskBudget, error) {
	if b == nil {
		return nil, nil
	}
	if b.Window != 0 {
		return nil, errors.Newf("budget: a task's budget covers its life: Window must be 0, not %s", b.Window)
	}
	if b.OnExhausted == BudgetWait && b.WaitTimeout == 0 {
		// The default, recorded: workers need not agree on it.
		b = &Budget{USD: b.USD, Tokens: b.Tokens, OnExhausted: b.OnExhausted, WaitTimeout: store.DefaultBudgetWaitTimeout}
	}
	tb := &history.TaskBudget{USD: b.USD, Tokens: b.Tokens, OnExhausted: string(b.OnExhausted), WaitTimeoutMillis: b.WaitTimeout.Milliseconds()}
	if b.WaitTimeout%time.Millisecond != 0 {
		return nil, errors.Newf("budget: WaitTimeout %s is not whole milliseconds", b.WaitTimeout)
	}
	if err := tb.Validate(); err != nil {
		return nil, err
	}
	return tb, nil
}

// BudgetScope names what a scope budget covers: the tasks of a fairness
// key (a tenant), or of a type, or, with neither set, every task of the
// client's namespace. Not both.
type BudgetScope struct {
	FairnessKey string
	Type        string
}

// Ref returns the scope's budget reference: "namespace",
// "fairness_key:<key>" or "type:<name>".
func (s BudgetScope) Ref() (string, error) {
	switch {
	case s.FairnessKey != "" && s.Type != "":
		return "", errors.Newf("budget scope: a fairness key (%q) or a type (%q), not both", s.FairnessKey, s.Type)
	case s.FairnessKey != "":
		if err := checkKey("fairness key", s.FairnessKey); err != nil {
			return "", err
		}
		return history.BudgetRefKeyPrefix + s.FairnessKey, nil
	case s.Type != "":
		if err := validateTypeName(s.Type); err != nil {
			return "", err
		}
		return history.BudgetRefTypePrefix + s.Type, nil
	}
	return history.BudgetRefNamespace, nil
}

// scopeOf is [BudgetScope.Ref]'s inverse.
func scopeOf(ref string) BudgetScope {
	if k, ok := strings.CutPrefix(ref, history.BudgetRefKeyPrefix); ok {
		return BudgetScope{FairnessKey: k}
	}
	if t, ok := strings.CutPrefix(ref, history.BudgetRefTypePrefix); ok {
		return BudgetScope{Type: t}
	}
	return BudgetScope{}
}

// SetBudget sets (creates or replaces) the budget of scope in the
// client's namespace: from the next step on (within a second on every
// worker), steps of the scope's tasks that declare their spend reserve
// it against the budget's current window. What the window has spent
// stays. b.Window is required (1 minute to 366 days, whole seconds).
// Invalid arguments are refused with [ErrInvalid], saying which. A
// namespace holds at most 1,000 scope budgets (store.MaxBudgets): a new
// one past them is an error marked store.ErrConflict (HTTP 409).
func (c *Client) SetBudget(ctx context.Context, scope BudgetScope, b Budget) error {
	def, err := scopeDef(scope, b)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "set budget"), ErrInvalid)
	}
	return c.store.Engine().BudgetSet(ctx, &store.BudgetSetParams{Namespace: c.namespace, Budget: def})
}

func scopeDef(scope BudgetScope, b Budget) (store.BudgetDef, error) {
	ref, err := scope.Ref()
	if err != nil {
		return store.BudgetDef{}, err
	}
	def := store.BudgetDef{Ref: ref, USD: b.USD, Tokens: b.Tokens, Window: b.Window, OnExhausted: string(b.OnExhausted), WaitTimeout: b.WaitTimeout}
	return def, def.Validate()
}

// BudgetInfo is a scope budget with its current window: what it has
// spent, what open reservations hold and what raises added.
type BudgetInfo struct {
	Scope  BudgetScope
	Ref    string // the budget's reference, for RaiseBudget
	Budget Budget
	// WindowStart is the start of the current window.
	WindowStart    time.Time
	SpentUSD       float64
	SpentTokens    int64
	ReservedUSD    float64
	ReservedTokens int64
	RaisedUSD      float64
	RaisedTokens   int64
	UpdatedAt      time.Time
}

// Budgets returns the scope budgets of the client's namespace, by
// reference, each with its current window's counts.
func (c *Client) Budgets(ctx context.Context) ([]BudgetInfo, error) {
	defs, err := c.store.Engine().BudgetList(ctx, &store.BudgetListParams{Namespace: c.namespace})
	if err != nil || len(defs) == 0 {
		return nil, err
	}
	now := engine.Now()
	keys := make([]store.BudgetWindowKey, len(defs))
	for i, d := range defs {
		keys[i] = store.BudgetWindowKey{Ref: d.Ref, Start: d.WindowStart(now)}
	}
	windows, err := c.store.Engine().BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: c.namespace, Keys: keys})
	if err != nil {
		return nil, err
	}
	out := make([]BudgetInfo, len(defs))
	for i, d := range defs {
		info := BudgetInfo{Scope: scopeOf(d.Ref), Ref: d.Ref, WindowStart: keys[i].Start, UpdatedAt: d.UpdatedAt,
			Budget: Budget{USD: d.USD, Tokens: d.Tokens, Window: d.Window, OnExhausted: BudgetAction(d.OnExhausted), WaitTimeout: d.WaitTimeout}}
		for _, w := range windows {
			if w.Key.Compare(keys[i]) == 0 {
				info.SpentUSD, info.SpentTokens, info.ReservedUSD, info.ReservedTokens = w.SpentUSD, w.SpentTokens, w.ReservedUSD, w.ReservedTokens
				info.RaisedUSD, info.RaisedTokens = w.RaisedUSD, w.RaisedTokens
			}
		}
		out[i] = info
	}
	return out, nil
}

// DeleteBudget removes the budget of scope; an unknown one is
// [cairntype.ErrNotFound]. Its windows' counts are kept: a budget set
// again counts on from them.
func (c *Client) DeleteBudget(ctx context.Context, scope BudgetScope) error {
	ref, err := scope.Ref()
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "delete budget"), ErrInvalid)
	}
	return c.store.Engine().BudgetDelete(ctx, &store.BudgetDeleteParams{Namespace: c.namespace, Ref: ref})
}

// BudgetRaise is a raise of a budget: USD and Tokens are added to its
// limits (a scope budget's current window's; a task budget's), By says
// who raised it and Reason why, for the ledger.
type BudgetRaise struct {
	USD    float64
	Tokens int64
	By     string
	Reason string
}

// RaiseBudget raises the budget ref names ("task:<id>" for a task's own
// budget, which covers its descendants; "namespace",
// "fairness_key:<key>" or "type:<name>" for the current window of a
// scope budget) and appends budget_raised to exactly the tasks waiting on
// it (refused by it with BudgetWait): they are due at once and retry the
// refused step. It returns their ids. A raise that is not enough for a
// task's step makes it wait again, to its first deadline. Invalid
// arguments are [ErrInvalid]; an unknown budget is
// [cairntype.ErrNotFound].
func (c *Client) RaiseBudget(ctx context.Context, ref string, r BudgetRaise) ([]uuid.UUID, error) {
	if err := history.ValidBudgetRef(ref); err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "raise budget"), ErrInvalid)
	}
	if err := checkKey("raise's By", r.By); err != nil || r.By == "" {
		return nil, errmark.Mark(errors.Newf("raise budget %s: By (who raises it) is required, up to %d bytes of text", ref, maxKeyLen), ErrInvalid)
	}
	if len(r.Reason) > maxKeyLen || !validText(r.Reason) {
		return nil, errmark.Mark(errors.Newf("raise budget %s: Reason is over %d bytes or not text", ref, maxKeyLen), ErrInvalid)
	}
	if err := history.ValidBudgetLimits(r.USD, r.Tokens); err != nil {
		return nil, errmark.Mark(errors.Wrapf(err, "raise budget %s", ref), ErrInvalid)
	}
	b, err := c.budgetOf(ctx, ref)
	if err != nil {
		return nil, err
	}
	res, err := engine.RaiseBudget(ctx, c.store.Engine(), &engine.RaiseParams{
		Namespace: c.namespace, Budget: b, USD: r.USD, Tokens: r.Tokens, By: r.By, Reason: r.Reason, At: engine.Now(),
	})
	return res.Woken, err
}

// budgetOf returns the budget ref names, with its limits and current
// window.
func (c *Client) budgetOf(ctx context.Context, ref string) (engine.Budget, error) {
	if id, ok := strings.CutPrefix(ref, history.BudgetRefTaskPrefix); ok {
		taskID, err := uuid.Parse(id)
		if err != nil {
			return engine.Budget{}, errmark.Mark(errors.Newf("raise budget %s: %q is not a task id", ref, id), ErrInvalid)
		}
		// Only its task_scheduled is needed: the first event.
		events, err := c.store.Engine().EventListPage(ctx, &store.EventPageParams{Namespace: c.namespace, TaskID: taskID, Limit: 1})
		if err != nil {
			return engine.Budget{}, err
		}
		if len(events) == 0 {
			return engine.Budget{}, errmark.Mark(errors.Newf("raise budget %s: no such task", ref), store.ErrNotFound)
		}
		sc, ok := events[0].Data.(history.TaskScheduledData)
		if !ok || sc.Budget == nil {
			return engine.Budget{}, errmark.Mark(errors.Newf("raise budget %s: the task was started without a budget", ref), store.ErrNotFound)
		}
		return engine.Budget{Key: store.BudgetWindowKey{Ref: ref}, LimitUSD: sc.Budget.USD, LimitTokens: sc.Budget.Tokens}, nil
	}
	defs, err := c.store.Engine().BudgetList(ctx, &store.BudgetListParams{Namespace: c.namespace})
	if err != nil {
		return engine.Budget{}, err
	}
	for _, d := range defs {
		if d.Ref == ref {
			return engine.Budget{Key: store.BudgetWindowKey{Ref: ref, Start: d.WindowStart(engine.Now())}, LimitUSD: d.USD, LimitTokens: d.Tokens}, nil
		}
	}
	return engine.Budget{}, errmark.Mark(errors.Newf("raise budget %s: no such budget in namespace %s", ref, c.namespace), store.ErrNotFound)
}
