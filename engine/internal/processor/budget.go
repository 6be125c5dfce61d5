package processor

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// maxBudgetTries bounds the retries of a reservation or settlement that
// raced an append to the task without its lease (a signal, a cancel
// request, a child's end).
const maxBudgetTries = 5

// BudgetReserve reserves a step's spend against the budgets that apply
// (see [requests.Reserve]), fenced by the attempt's lease, and takes the
// ledger's event into the attempt's state. p.Append is filled in here.
// A signal, cancel request or child's end appended meanwhile is taken
// into the state and the reservation tried again. Unlike the attempt's
// other methods it may be called from any of the run's goroutines
// (parallel steps reserve concurrently): the attempt's appends are
// serialized.
func (a *Attempt) BudgetReserve(ctx context.Context, p requests.ReserveParams) (requests.ReserveResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		p.Append = *a.appendParams(nil)
		res, err := requests.Reserve(ctx, a.proc.cfg.Store, &p)
		if errors.Is(err, store.ErrConflict) && try+1 < maxBudgetTries {
			if err := a.syncRequests(ctx); err != nil {
				return res, err
			}
			continue
		}
		if err != nil {
			return res, err
		}
		a.state = res.State
		return res, nil
	}
}

// BudgetSettle settles a step's spend (see [requests.Settle]), fenced
// by the attempt's lease, as [Attempt.BudgetReserve] reserves it.
func (a *Attempt) BudgetSettle(ctx context.Context, p requests.SettleParams) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		p.Append = *a.appendParams(nil)
		next, err := requests.Settle(ctx, a.proc.cfg.Store, &p)
		if errors.Is(err, store.ErrConflict) && try+1 < maxBudgetTries {
			if err := a.syncRequests(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		a.state = next
		if next.CancelRequested {
			a.proc.requestCancel(a.Task.ID)
		}
		return nil
	}
}

// LockedState returns the attempt's state as [Attempt.State] does, read
// under the lock its budget calls and appends take: for a run's other
// goroutines.
func (a *Attempt) LockedState() history.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}
