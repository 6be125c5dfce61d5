package requests

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// Budget is a budget that applies to a step: the window it counts in,
// its limits, and what happens at them.
type Budget struct {
	Key         store.BudgetWindowKey
	LimitUSD    float64
	LimitTokens int64
	OnExhausted string        // history.BudgetFail ("" too) or history.BudgetWait
	WaitTimeout time.Duration // 0: store.DefaultBudgetWaitTimeout
	// Window is a scope budget's window (0 for a task's): a task that
	// waits on it is due again when Key's window ends.
	Window time.Duration
}

// ReserveParams reserves a step's declared spend against the budgets
// that apply to it (see [Reserve]).
type ReserveParams struct {
	// Append is the attempt's fenced append (its Payloads empty): the
	// ledger's event goes in it.
	Append   store.EventAppendParams
	Position int
	Step     string
	Spend    history.Spend
	Budgets  []Budget
	// Now is when the reservation is made: a wait's deadline counts from
	// it, and a wait past its deadline fails.
	Now time.Time
	// DeferWait: a refusal by a budget that waits writes nothing (it is
	// returned without a Deadline, as when parallel steps hold
	// reservations). For a step of a future, whose refusal must not end
	// the attempt before the body's outcome is known: the attempt, ending,
	// reserves again without it.
	DeferWait bool
}

// ReserveResult says what a reservation did: State is the task's after
// the ledger's event; Refused is set when the step may not run (its
// Action says whether the task fails or waits: a wait ended the attempt;
// a wait without a Deadline wrote nothing, as parallel steps of the
// attempt hold reservations, and the attempt should be retried).
type ReserveResult struct {
	State   history.State
	Refused *history.BudgetRefusedData
}

// Reserve reserves p.Spend against every budget of p.Budgets, all or
// nothing, over ex (a store or a Tx of one: in a transaction, nested on
// a Tx): it locks the budgets' windows in key order, checks that spent +
// reserved + the ask fits each one's limit plus its raises, adds the ask
// to each one's reserved count, records the reservation, and appends
// budget_reserved, fenced by the attempt's lease. When a budget would go
// past its limit nothing is reserved: budget_refused is appended, with
// the action of the budget (a fail wins over a wait; a wait whose
// deadline passed fails), and for a wait the task is recorded as waiting
// on the budget's window (a raise wakes it). An append refused (ErrFenced,
// ErrConflict: a signal or cancel request came first) rolls everything
// back: the error is marked as EventAppend's.
func Reserve(ctx context.Context, ex store.Executor, p *ReserveParams) (ReserveResult, error) {
	if len(p.Budgets) == 0 {
		return ReserveResult{State: p.Append.State}, errors.AssertionFailedf("reserve for task %s: no budget applies", p.Append.TaskID)
	}
	if p.Append.Epoch == 0 {
		return ReserveResult{State: p.Append.State}, errors.AssertionFailedf("reserve for task %s: not fenced by an attempt's lease", p.Append.TaskID)
	}
	res, err := inTx(ctx, ex, func(tx store.Tx) (ReserveResult, error) { return reserve(ctx, tx, p) })
	if err != nil {
		return ReserveResult{State: p.Append.State}, errors.Wrapf(err, "reserve for task %s step %d", p.Append.TaskID, p.Position)
	}
	return res, nil
}

func reserve(ctx context.Context, tx store.Tx, p *ReserveParams) (ReserveResult, error) {
	ns := p.Append.State.Scheduled.Namespace
	limits := make([]store.BudgetWindowLimit, len(p.Budgets))
	byKey := make(map[store.BudgetWindowKey]Budget, len(p.Budgets))
	for i, b := range p.Budgets {
		limits[i] = store.BudgetWindowLimit{Key: b.Key, LimitUSD: b.LimitUSD, LimitTokens: b.LimitTokens}
		byKey[b.Key] = b
	}
	windows, err := tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: ns, Windows: limits})
	if err != nil {
		return ReserveResult{}, err
	}
	usd, tokens := p.Spend.CostUSD, p.Spend.Tokens
	var refused *history.BudgetRefusedData
	var refusedKey store.BudgetWindowKey
	for _, w := range windows {
		if w.Fits(usd, tokens) {
			continue
		}
		b := byKey[w.Key]
		action := history.BudgetAction(b.OnExhausted)
		if refused != nil && (refused.Action == history.BudgetFail || action == history.BudgetWait) {
			continue // the first fail, else the first wait
		}
		refused = &history.BudgetRefusedData{
			Position: p.Position, Step: p.Step, Budget: w.Key.History(), Action: action, Tokens: tokens, CostUSD: usd,
			LimitUSD: w.LimitUSD + w.RaisedUSD, LimitTokens: w.LimitTokens + w.RaisedTokens, SpentUSD: w.SpentUSD, SpentTokens: w.SpentTokens,
			ReservedUSD: w.ReservedUSD, ReservedTokens: w.ReservedTokens,
		}
		refusedKey = w.Key
	}
	ap := p.Append
	if refused != nil && refused.Action == history.BudgetWait && (len(p.Append.State.Reservations) > 0 || p.DeferWait) {
		// Parallel steps of the attempt hold reservations: it cannot end
		// waiting before they settle. Nothing is written; the caller
		// fails the attempt to retry it (a refusal without a deadline).
		return ReserveResult{State: p.Append.State, Refused: refused}, nil
	}
	if refused != nil {
		if refused.Action == history.BudgetWait {
			deadline := waitDeadline(p.Append.State, p.Position, p.Now, byKey[refusedKey].WaitTimeout)
			if !p.Now.Before(deadline) {
				refused.Action = history.BudgetFail // waited long enough
			} else {
				refused.Deadline = &deadline
				if w := byKey[refusedKey].Window; w > 0 && !refusedKey.Start.IsZero() {
					end := refusedKey.Start.Add(w)
					refused.WindowEnd = &end
				}
				if err := tx.BudgetWaitInsert(ctx, &store.BudgetWaitParams{Namespace: ns, Key: refusedKey, TaskID: p.Append.TaskID}); err != nil {
					return ReserveResult{}, err
				}
			}
		}
		ap.Payloads = []history.Payload{*refused}
		next, err := tx.EventAppend(ctx, &ap)
		if err != nil {
			return ReserveResult{}, err
		}
		return ReserveResult{State: next, Refused: refused}, nil
	}
	deltas := make([]store.BudgetWindowDelta, len(windows))
	entries := make([]store.BudgetReservationEntry, len(windows))
	refs := make([]history.BudgetWindowRef, len(windows))
	for i, w := range windows {
		deltas[i] = store.BudgetWindowDelta{Key: w.Key, ReservedUSD: usd, ReservedTokens: tokens}
		entries[i] = store.BudgetReservationEntry{Key: w.Key, USD: usd, Tokens: tokens}
		refs[i] = w.Key.History()
	}
	if err := tx.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: ns, Deltas: deltas}); err != nil {
		return ReserveResult{}, err
	}
	if err := tx.BudgetReservationInsert(ctx, &store.BudgetReservationInsertParams{
		Namespace: ns, TaskID: p.Append.TaskID, Attempt: p.Append.Attempt, Position: p.Position, Entries: entries,
	}); err != nil {
		return ReserveResult{}, err
	}
	ap.Payloads = []history.Payload{history.BudgetReservedData{Position: p.Position, Step: p.Step, Budgets: refs, Tokens: tokens, CostUSD: usd}}
	next, err := tx.EventAppend(ctx, &ap)
	if err != nil {
		return ReserveResult{}, err
	}
	return ReserveResult{State: next}, nil
}

// waitDeadline is when a wait over a budget at position ends: the
// deadline of the wait the task was in at that step (a raise that was
// not enough, or a wake of another kind, does not start it afresh), else
// now plus the budget's timeout.
func waitDeadline(s history.State, position int, now time.Time, timeout time.Duration) time.Time {
	if w := s.BudgetWait; w != nil && w.Position == position {
		return w.Deadline
	}
	if timeout <= 0 {
		timeout = store.DefaultBudgetWaitTimeout
	}
	return now.Add(min(timeout, store.MaxBudgetWaitTimeout))
}

// SettleParams settles a step's spend (see [Settle]).
type SettleParams struct {
	// Append is the attempt's fenced append (its Payloads empty), or the
	// rescuer's (ExpiredOnly), whose Payloads then follow the ledger's
	// event (lease_expired, ...).
	Append   store.EventAppendParams
	Position int
	Step     string
	Reason   string // one of the history.Settle* constants
	// Reserved says the step holds a reservation (in Append.Attempt, at
	// Position): its windows are settled. Otherwise Budgets are the
	// budgets that apply, charged with what the step spent.
	Reserved bool
	Budgets  []Budget
	// Tokens and CostUSD are what the step spent.
	Tokens  int64
	CostUSD float64
}

// Settle settles a step's spend over ex (in a transaction; nested on a
// Tx): its reservation, if it holds one, is removed and given back to
// each window it took, what the step spent is added to each one's spent
// count (a step without a reservation is charged to p.Budgets), and
// budget_settled is appended (before p.Append.Payloads), fenced. It
// returns the task's state after the append. An append refused rolls
// everything back, as [Reserve]'s.
func Settle(ctx context.Context, ex store.Executor, p *SettleParams) (history.State, error) {
	next, err := inTx(ctx, ex, func(tx store.Tx) (history.State, error) { return settle(ctx, tx, p) })
	if err != nil {
		return p.Append.State, errors.Wrapf(err, "settle task %s step %d", p.Append.TaskID, p.Position)
	}
	return next, nil
}

func settle(ctx context.Context, tx store.Tx, p *SettleParams) (history.State, error) {
	ns := p.Append.State.Scheduled.Namespace
	settled := history.BudgetSettledData{Position: p.Position, Step: p.Step, Reason: p.Reason, Reserved: p.Reserved, Tokens: p.Tokens, CostUSD: p.CostUSD}
	var deltas []store.BudgetWindowDelta
	if p.Reserved {
		entries, err := tx.BudgetReservationDelete(ctx, &store.BudgetReservationDeleteParams{TaskID: p.Append.TaskID, Attempt: p.Append.Attempt, Position: p.Position})
		if err != nil {
			return history.State{}, err
		}
		for _, e := range entries {
			deltas = append(deltas, store.BudgetWindowDelta{Key: e.Key, ReservedUSD: -e.USD, ReservedTokens: -e.Tokens, SpentUSD: p.CostUSD, SpentTokens: p.Tokens})
			settled.Budgets = append(settled.Budgets, e.Key.History())
			settled.ReservedUSD, settled.ReservedTokens = e.USD, e.Tokens
		}
		if len(entries) == 0 {
			// The history holds the reservation, so its rows were written
			// with it: gone means settled by a writer this append will
			// not follow (the rescuer, whose lease_expired fences it).
			if r, ok := p.Append.State.ReservationAt(p.Append.Attempt, p.Position); ok {
				settled.Budgets, settled.ReservedUSD, settled.ReservedTokens = r.Budgets, r.CostUSD, r.Tokens
			}
		}
	} else {
		limits := make([]store.BudgetWindowLimit, len(p.Budgets))
		for i, b := range p.Budgets {
			limits[i] = store.BudgetWindowLimit{Key: b.Key, LimitUSD: b.LimitUSD, LimitTokens: b.LimitTokens}
		}
		windows, err := tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: ns, Windows: limits})
		if err != nil {
			return history.State{}, err
		}
		for _, w := range windows {
			deltas = append(deltas, store.BudgetWindowDelta{Key: w.Key, SpentUSD: p.CostUSD, SpentTokens: p.Tokens})
			settled.Budgets = append(settled.Budgets, w.Key.History())
		}
	}
	// One window at a time, in key order: concurrent settles take their
	// rows' locks in the same order.
	for _, d := range store.SumDeltas(deltas) {
		if err := tx.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: ns, Deltas: []store.BudgetWindowDelta{d}}); err != nil {
			return history.State{}, err
		}
	}
	if len(settled.Budgets) == 0 {
		return history.State{}, errors.AssertionFailedf("settle task %s step %d: no budget to settle", p.Append.TaskID, p.Position)
	}
	ap := p.Append
	ap.Payloads = append([]history.Payload{settled}, p.Append.Payloads...)
	return tx.EventAppend(ctx, &ap)
}

// UsageTotals returns what usage adds up to: tokens (input and output)
// and dollars; a cost that is not a finite number >= 0 counts as 0.
func UsageTotals(usage []history.Usage) (tokens int64, usd float64) {
	for _, u := range usage {
		tokens += max(u.InputTokens, 0) + max(u.OutputTokens, 0)
		if !math.IsNaN(u.CostUSD) && !math.IsInf(u.CostUSD, 0) && u.CostUSD > 0 {
			usd += u.CostUSD
		}
	}
	return tokens, usd
}

// RaiseParams raises a budget's window (see [RaiseBudget]).
type RaiseParams struct {
	Namespace string
	// Budget is the budget raised with its limits (a scope budget's as
	// defined, a task budget's from its task_scheduled): its window is
	// written with them if it was not yet.
	Budget Budget
	USD    float64
	Tokens int64
	By     string
	Reason string
	At     time.Time
}

// RaiseResult is what a raise did: the window after it, and the tasks it
// woke (those that waited on it).
type RaiseResult struct {
	Window store.BudgetWindow
	Woken  []uuid.UUID
}

// RaiseBudget adds p.USD and p.Tokens to the limits of a budget's window,
// in one transaction over ex: it takes the tasks recorded as waiting on
// the window and appends budget_raised to each that still waits on the
// budget (pending, its budget wait not raised yet), which makes it due
// at once: it retries the refused step. A task that no longer waits
// (its deadline woke it, it was cancelled) is left as it is.
func RaiseBudget(ctx context.Context, ex store.Executor, p *RaiseParams) (RaiseResult, error) {
	switch {
	case p.By == "":
		return RaiseResult{}, errors.New("raise budget: By (who raises it) is required")
	case p.USD < 0 || p.Tokens < 0 || math.IsNaN(p.USD) || math.IsInf(p.USD, 0) || (p.USD == 0 && p.Tokens == 0):
		return RaiseResult{}, errors.Newf("raise budget %s: USD %v and Tokens %d must be finite, >= 0, and not both 0", p.Budget.Key.Ref, p.USD, p.Tokens)
	}
	res, err := inTx(ctx, ex, func(tx store.Tx) (RaiseResult, error) { return raise(ctx, tx, p) })
	return res, errors.Wrapf(err, "raise budget %s", p.Budget.Key.Ref)
}

func raise(ctx context.Context, tx store.Tx, p *RaiseParams) (RaiseResult, error) {
	key := p.Budget.Key
	if _, err := tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: p.Namespace, Windows: []store.BudgetWindowLimit{
		{Key: key, LimitUSD: p.Budget.LimitUSD, LimitTokens: p.Budget.LimitTokens},
	}}); err != nil {
		return RaiseResult{}, err
	}
	if err := tx.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: p.Namespace, Deltas: []store.BudgetWindowDelta{
		{Key: key, RaisedUSD: p.USD, RaisedTokens: p.Tokens},
	}}); err != nil {
		return RaiseResult{}, err
	}
	windows, err := tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: p.Namespace, Windows: []store.BudgetWindowLimit{
		{Key: key, LimitUSD: p.Budget.LimitUSD, LimitTokens: p.Budget.LimitTokens},
	}})
	if err != nil {
		return RaiseResult{}, err
	}
	w := windows[0]
	waiting, err := tx.BudgetWaitTake(ctx, &store.BudgetWaitParams{Namespace: p.Namespace, Key: key})
	if err != nil {
		return RaiseResult{}, err
	}
	slices.SortFunc(waiting, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	raised := history.BudgetRaisedData{Budget: key.History(), By: p.By, Reason: p.Reason, USD: p.USD, Tokens: p.Tokens,
		LimitUSD: w.LimitUSD + w.RaisedUSD, LimitTokens: w.LimitTokens + w.RaisedTokens}
	res := RaiseResult{Window: w}
	for _, id := range waiting {
		events, err := store.TaskEvents(ctx, tx, p.Namespace, id)
		if err != nil {
			return RaiseResult{}, err
		}
		if len(events) == 0 {
			continue // removed
		}
		state, err := history.Replay(events)
		if err != nil {
			return RaiseResult{}, err
		}
		bw := state.BudgetWait
		if state.Status != history.StatusPending || bw == nil || bw.Raised ||
			!slices.ContainsFunc(bw.Budgets, func(r history.BudgetWindowRef) bool { return r.Ref == key.Ref }) {
			continue // woken otherwise meanwhile
		}
		if _, err := tx.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state, At: p.At, Payloads: []history.Payload{raised}}); err != nil {
			return RaiseResult{}, err
		}
		res.Woken = append(res.Woken, id)
	}
	return res, nil
}

// inTx runs fn in a transaction of ex (nested on a Tx) and commits it;
// on an error it rolls back, even when ctx has ended.
func inTx[T any](ctx context.Context, ex store.Executor, fn func(store.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := ex.Begin(ctx)
	if err != nil {
		return zero, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	out, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, err
	}
	return out, nil
}
