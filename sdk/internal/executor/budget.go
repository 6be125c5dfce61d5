package executor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// KindBudgetExhausted is the error kind of a task a budget stopped: a
// step's declared spend would have taken a budget whose action is to
// fail past its limit, or a task over a budget that waits was not raised
// before its wait's deadline. It is always permanent.
const KindBudgetExhausted = "budget_exhausted"

// errBudgetWaiting ends a run whose step a budget that waits refused: the
// refusal ended the attempt (budget_refused), so nothing more is appended.
var errBudgetWaiting = errors.New("over budget: the task waits for a raise")

// errStepNotRun marks the error a step's settle is given when the step
// did not run (a later gate refused it).
var errStepNotRun = errors.New("the step did not run")

// scopeRefresh bounds how stale a worker's copy of its namespaces' scope
// budgets may be: a budget set (or deleted) applies on every worker
// within it.
const scopeRefresh = time.Second

// budgets is the budget gate's state: a per-worker cache of the scope
// budgets of the namespaces its tasks run in, so that a step of a task
// with no budget costs no query.
type budgets struct {
	mu     sync.Mutex
	scopes map[string]scopeEntry // by namespace
}

type scopeEntry struct {
	defs []store.BudgetDef
	at   time.Time
}

// scopeDefs returns the namespace's scope budgets, read at most
// scopeRefresh ago.
func (b *budgets) scopeDefs(ctx context.Context, a *edge.Attempt) ([]store.BudgetDef, error) {
	b.mu.Lock()
	e, ok := b.scopes[a.Task.Namespace]
	b.mu.Unlock()
	if ok && time.Since(e.at) < scopeRefresh {
		return e.defs, nil
	}
	defs, err := a.ScopeBudgets(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "read the namespace's budgets")
	}
	b.mu.Lock()
	b.scopes[a.Task.Namespace] = scopeEntry{defs: defs, at: time.Now()}
	b.mu.Unlock()
	return defs, nil
}

// applicable returns the budgets that apply to a step of the attempt's
// task at now: its own, those it inherits, its namespace's, its fairness
// key's and its type's.
func (b *budgets) applicable(ctx context.Context, a *edge.Attempt, now time.Time) ([]engine.Budget, error) {
	sc, err := a.Scheduled(ctx)
	if err != nil {
		return nil, err
	}
	var out []engine.Budget
	task := func(ref string, tb history.TaskBudget) {
		out = append(out, engine.Budget{Key: store.BudgetWindowKey{Ref: ref}, LimitUSD: tb.USD, LimitTokens: tb.Tokens,
			OnExhausted: tb.OnExhausted, WaitTimeout: time.Duration(tb.WaitTimeoutMillis) * time.Millisecond})
	}
	for _, tb := range sc.Budgets { // the furthest ancestors' first
		task(tb.Ref, tb)
	}
	if sc.Budget != nil {
		task(history.BudgetRefTaskPrefix+a.Task.ID.String(), *sc.Budget)
	}
	defs, err := b.scopeDefs(ctx, a)
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		switch d.Ref {
		case history.BudgetRefNamespace, history.BudgetRefTypePrefix + a.Task.Type:
		case history.BudgetRefKeyPrefix + sc.FairnessKey:
			if sc.FairnessKey == "" {
				continue
			}
		default:
			continue
		}
		out = append(out, engine.Budget{Key: store.BudgetWindowKey{Ref: d.Ref, Start: d.WindowStart(now)}, LimitUSD: d.USD, LimitTokens: d.Tokens,
			OnExhausted: d.OnExhausted, WaitTimeout: d.WaitTimeout, Window: d.Window})
	}
	if len(out) > store.MaxBudgetsPerStep {
		out = out[len(out)-store.MaxBudgetsPerStep:] // its own, the nearest ancestors' and the scopes'
	}
	return out, nil
}

// gate is the budget gate (one of Handler.gates): before a step that
// declares its spend it reserves it against every budget that applies,
// and settles the reservation with what the step reported once it ran; a
// step without a declared spend is not held, but what it reported is
// charged after it. A refusal fails the task (kind budget_exhausted) or
// ends the attempt waiting for a raise, as the budget says.
func (b *budgets) gate(ctx context.Context, a *edge.Attempt, step interpreter.StepInfo, spend *history.Spend) (func([]history.Usage, error) error, error) {
	if spend == nil || (spend.Tokens == 0 && spend.CostUSD == 0) {
		// Not held: charged after, with what it reported. Which budgets
		// apply is looked up only then, so a step that spends nothing
		// (most steps) costs no read.
		return func(usage []history.Usage, stepErr error) error {
			tokens, usd := engine.UsageTotals(usage)
			if tokens == 0 && usd == 0 {
				return nil
			}
			applies, err := b.applicable(a.DurableContext(), a, engine.Now())
			if err != nil || len(applies) == 0 {
				return err
			}
			reason := history.SettleStepCompleted
			if stepErr != nil {
				reason = history.SettleStepFailed
			}
			return a.BudgetSettle(a.DurableContext(), engine.SettleParams{Position: step.Position, Step: step.Name,
				Reason: reason, Budgets: applies, Tokens: tokens, CostUSD: usd})
		}, nil
	}
	now := engine.Now()
	applies, err := b.applicable(ctx, a, now)
	if err != nil || len(applies) == 0 {
		return nil, err
	}
	params := engine.ReserveParams{Position: step.Position, Step: step.Name, Spend: *spend, Budgets: applies, Now: now,
		DeferWait: step.Future}
	res, err := a.BudgetReserve(a.DurableContext(), params)
	for err == nil && isWaitHeldBack(res.Refused) && len(a.LockedState().Reservations) > 0 && awaitSiblings(ctx, a) {
		// Refused by a budget that waits while parallel steps hold
		// reservations: once they have settled, ask again (their
		// settlement may leave room), and if still refused, wait.
		params.Now = engine.Now()
		res, err = a.BudgetReserve(a.DurableContext(), params)
	}
	if err != nil {
		return nil, err
	}
	if r := res.Refused; r != nil {
		if step.Future && isWaitHeldBack(r) && len(a.LockedState().Reservations) == 0 {
			// A future's step refused by a budget that waits: the refusal
			// ends the attempt only if the run does not complete first
			// (see outcome), so nothing is written yet.
			params.DeferWait = false
			return nil, errmark.Mark(&deferredBudgetWait{params: params, err: budgetRefusal(r)}, interpreter.ErrFutureOnly)
		}
		return nil, budgetRefusal(r)
	}
	return func(usage []history.Usage, stepErr error) error {
		reason := history.SettleStepCompleted
		switch {
		case errors.Is(stepErr, errStepNotRun):
			reason = history.SettleReleased
		case stepErr != nil:
			reason = history.SettleStepFailed
		}
		tokens, usd := engine.UsageTotals(usage)
		return a.BudgetSettle(a.DurableContext(), engine.SettleParams{Position: step.Position, Step: step.Name,
			Reason: reason, Reserved: true, Tokens: tokens, CostUSD: usd})
	}, nil
}

// deferredBudgetWait is the error of a future's step a budget that waits
// refused: the future fails with it, and a run the body ends with it
// (returning the future's error) ends its attempt by reserving again
// (params), which writes the refusal and waits. A body that completes
// the run without it leaves nothing of the refusal.
type deferredBudgetWait struct {
	params engine.ReserveParams
	err    error
}

func (d *deferredBudgetWait) Error() string { return d.err.Error() }
func (d *deferredBudgetWait) Unwrap() error { return d.err }

// endDeferredWait ends the attempt of a run a deferred refusal stopped:
// reserved again, the refusal is written and the task waits (ended); a
// refusal that fails now is the run's error (runErr); a reservation that
// fits now is released, and the attempt retried (a transient runErr).
// err is a store's failure.
func endDeferredWait(a *edge.Attempt, d *deferredBudgetWait) (ended bool, runErr, err error) {
	d.params.Now = engine.Now()
	res, err := a.BudgetReserve(a.DurableContext(), d.params)
	switch {
	case err != nil:
		return false, nil, err
	case res.Refused == nil:
		if err := a.BudgetSettle(a.DurableContext(), engine.SettleParams{Position: d.params.Position, Step: d.params.Step,
			Reason: history.SettleReleased, Reserved: true}); err != nil {
			return false, nil, err
		}
		return false, activities.Transient(errors.Newf("step %d (%s): its budget has room again", d.params.Position, d.params.Step)), nil
	case res.Refused.Action == history.BudgetWait && res.Refused.Deadline != nil:
		return true, nil, nil
	}
	return false, budgetRefusal(res.Refused), nil
}

// budgetRefusal is the error a refused step ends its run with.
func budgetRefusal(r *history.BudgetRefusedData) error {
	what := fmt.Sprintf("step %d (%s) would spend %d tokens, $%.4f; budget %s has spent %d tokens, $%.4f, holds %d tokens, $%.4f reserved, of a limit of %s",
		r.Position, r.Step, r.Tokens, r.CostUSD, r.Budget, r.SpentTokens, r.SpentUSD, r.ReservedTokens, r.ReservedUSD, limitText(r.LimitUSD, r.LimitTokens))
	if r.Action == history.BudgetWait && r.Deadline == nil {
		return activities.Transient(errors.Newf("%s: parallel steps hold reservations, so the attempt is retried before it waits", what))
	}
	if r.Action == history.BudgetWait {
		return errmark.Mark(errors.Newf("%s: waiting for a raise until %s", what, r.Deadline.Format(time.RFC3339)), errBudgetWaiting)
	}
	return activities.WithKind(activities.Permanent(errors.Newf("%s", what)), KindBudgetExhausted)
}

func limitText(usd float64, tokens int64) string {
	switch {
	case usd > 0 && tokens > 0:
		return fmt.Sprintf("$%.4f and %d tokens", usd, tokens)
	case usd > 0:
		return fmt.Sprintf("$%.4f", usd)
	}
	return fmt.Sprintf("%d tokens", tokens)
}

// inheritedBudgets are the budgets a child of the attempt's task
// inherits: every one that covers the task (its own, named by its id).
func inheritedBudgets(a *edge.Attempt) ([]history.TaskBudget, error) {
	sc, err := a.Scheduled(a.DurableContext())
	if err != nil {
		return nil, err
	}
	out := append([]history.TaskBudget(nil), sc.Budgets...)
	if b := sc.Budget; b != nil {
		own := *b
		own.Ref = history.BudgetRefTaskPrefix + a.Task.ID.String()
		out = append(out, own)
	}
	if len(out) > store.MaxBudgetsPerStep-3 {
		out = out[len(out)-(store.MaxBudgetsPerStep-3):] // the nearest ancestors'
	}
	return out, nil
}

// settleLeftovers settles the reservations the attempt still holds as
// it ends: a step whose own settle failed (the run stopped there)
// leaves one, which no later attempt would settle and no rescuer sees
// (the attempt ends well). What the step spent is unknown, so the whole
// reservation is charged, as the rescuer does.
func settleLeftovers(a *edge.Attempt) error {
	state := a.LockedState()
	for _, r := range state.Reservations {
		if r.Attempt != state.Attempt {
			continue
		}
		err := a.BudgetSettle(a.DurableContext(), engine.SettleParams{Position: r.Position, Step: r.Step,
			Reason: history.SettleAttemptEnded, Reserved: true, Tokens: r.Tokens, CostUSD: r.CostUSD})
		if err != nil {
			return errors.Wrapf(err, "settle step %d's open reservation", r.Position)
		}
	}
	return nil
}

// isWaitHeldBack says whether r is a refusal by a budget that waits
// that could not end the attempt: parallel steps held reservations.
func isWaitHeldBack(r *history.BudgetRefusedData) bool {
	return r != nil && r.Action == history.BudgetWait && r.Deadline == nil
}

// siblingsWait bounds how long a refused parallel step waits for its
// siblings' reservations to settle before the attempt fails to retry.
const siblingsWait = time.Minute

// awaitSiblings waits until the attempt holds no reservation (its
// parallel steps have settled theirs), polling its state, and reports
// whether it does; false when ctx ends or siblingsWait passes first.
func awaitSiblings(ctx context.Context, a *edge.Attempt) bool {
	deadline := time.Now().Add(siblingsWait)
	for poll := 5 * time.Millisecond; ; poll = min(2*poll, 200*time.Millisecond) {
		if len(a.LockedState().Reservations) == 0 {
			return true
		}
		if !time.Now().Add(poll).Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
	}
}
