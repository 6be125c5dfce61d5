package sdk

import (
	"context"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// MaxBudgetWaitScan bounds the pending tasks [Client.BudgetWaits] reads
// the histories of: the newest that are due later (a task waiting on a
// budget is pending, due at its wait's deadline).
const MaxBudgetWaitScan = 1000

// budgetWaitPage is how many tasks one read of BudgetWaits lists.
const budgetWaitPage = 250

// BudgetWaiter is a task waiting on a budget: a step of it was refused
// by a budget of [BudgetWait] (budget_refused), and no raise of that
// budget has come since. [Client.RaiseBudget] of Budget wakes it while
// Window is the budget's current window.
type BudgetWaiter struct {
	Task *TaskInfo
	// Budget is the reference of the budget that refused the step (the
	// ref RaiseBudget takes), Window the start of the window it was
	// refused in (a scope budget's; nil for a task's).
	Budget string
	Window *time.Time
	// Position and Step name the refused step, Tokens and CostUSD what
	// it declared; LimitUSD, LimitTokens, SpentUSD and SpentTokens are
	// the budget's when it refused it (raises included).
	Position           int
	Step               string
	Tokens             int64
	CostUSD            float64
	LimitUSD, SpentUSD float64
	LimitTokens        int64
	SpentTokens        int64
	Since, Deadline    time.Time // the refusal; when the wait fails the task
}

// BudgetWaitList is what [Client.BudgetWaits] found. Partial says that
// it stopped at [MaxBudgetWaitScan] pending tasks: older waits may be
// left out.
type BudgetWaitList struct {
	Tasks   []BudgetWaiter
	Partial bool
}

// BudgetWaits lists the tasks of the client's namespace waiting on the
// budget ref names ("namespace", "fairness_key:<key>", "type:<name>",
// "task:<id>"), or on any budget when ref is empty, newest first. It
// reads the histories of the newest [MaxBudgetWaitScan] pending tasks due
// later, a few hundred at a time, and says when there were more. An
// invalid ref is [ErrInvalid].
func (c *Client) BudgetWaits(ctx context.Context, ref string) (BudgetWaitList, error) {
	if ref != "" {
		if err := history.ValidBudgetRef(ref); err != nil {
			return BudgetWaitList{}, errmark.Mark(errors.Wrap(err, "budget waits"), ErrInvalid)
		}
	}
	var out BudgetWaitList
	p := &store.TaskListParams{Namespace: c.namespace, Status: history.StatusPending, Limit: budgetWaitPage, OmitInput: true, OmitOutput: true}
	for scanned := 0; scanned < MaxBudgetWaitScan; {
		p.Limit = min(budgetWaitPage, MaxBudgetWaitScan-scanned)
		tasks, err := c.store.TaskList(ctx, p)
		if err != nil {
			return BudgetWaitList{}, err
		}
		if len(tasks) == 0 {
			return out, nil
		}
		scanned += len(tasks)
		p.Before = tasks[len(tasks)-1].ID
		if err := c.budgetWaitsOf(ctx, tasks, ref, &out); err != nil {
			return BudgetWaitList{}, err
		}
		if len(tasks) < p.Limit {
			return out, nil
		}
	}
	// The bound is reached: more pending tasks may follow.
	more, err := c.store.TaskList(ctx, &store.TaskListParams{Namespace: c.namespace, Status: history.StatusPending,
		Before: p.Before, Limit: 1, OmitInput: true, OmitOutput: true})
	out.Partial = len(more) > 0
	return out, err
}

// budgetWaitsOf adds to out the tasks among tasks (pending, a page of
// the listing) waiting on ref (any budget when empty).
func (c *Client) budgetWaitsOf(ctx context.Context, tasks []*store.Task, ref string, out *BudgetWaitList) error {
	now := time.Now()
	var ids []uuid.UUID
	for _, t := range tasks {
		if t.RunAt.After(now) { // due now: not waiting (woken, or about to time out)
			ids = append(ids, t.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	histories, err := c.RawHistories(ctx, ids)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		events := histories[t.ID]
		if len(events) == 0 {
			continue
		}
		w, ok := BudgetWaitOf(events)
		if !ok || ref != "" && w.Budget != ref {
			continue
		}
		w.Task = taskInfo(t)
		out.Tasks = append(out.Tasks, w)
	}
	return nil
}

// BudgetWaitOf returns the budget wait a task's history (as
// [Client.RawHistory] or [Client.History] returns it) ends in, if it
// does: the task is pending, refused by a budget of [BudgetWait], not
// raised since. Its Task is nil.
func BudgetWaitOf(events []history.Event) (BudgetWaiter, bool) {
	state, err := history.Replay(events)
	if err != nil || state.Status != history.StatusPending || state.BudgetWait == nil || state.BudgetWait.Raised ||
		len(state.BudgetWait.Budgets) == 0 {
		return BudgetWaiter{}, false
	}
	bw := state.BudgetWait
	w := BudgetWaiter{Budget: bw.Budgets[0].Ref, Window: bw.Budgets[0].Window, Position: bw.Position, Deadline: bw.Deadline}
	// The refusal that began the wait: the last at its position, of the
	// budget it waits on.
	for _, e := range slices.Backward(events) {
		if p, ok := e.Data.(history.BudgetRefusedData); ok && p.Position == bw.Position && p.Action == history.BudgetWait && p.Budget.Ref == w.Budget {
			w.Step, w.Tokens, w.CostUSD, w.Since = p.Step, p.Tokens, p.CostUSD, e.At
			w.LimitUSD, w.LimitTokens, w.SpentUSD, w.SpentTokens = p.LimitUSD, p.LimitTokens, p.SpentUSD, p.SpentTokens
			break
		}
	}
	return w, true
}
