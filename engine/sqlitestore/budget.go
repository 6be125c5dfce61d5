package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// BudgetSet implements [store.Executor].
func (s *Store) BudgetSet(ctx context.Context, p *store.BudgetSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	b := p.Budget
	action := history.BudgetAction(b.OnExhausted)
	err := s.tx(ctx, func(tx *txn) error {
		var n, exists int
		if err := tx.queryRow(ctx, "BudgetCount", p.Namespace, b.Ref).Scan(&n, &exists); err != nil {
			return interpret(err)
		}
		if exists == 0 && n >= store.MaxBudgets {
			return errmark.Mark(errors.Newf("namespace %s holds %d budgets already, the most it may", p.Namespace, store.MaxBudgets),
				store.ErrConflict)
		}
		_, err := tx.exec(ctx, "BudgetSet", p.Namespace, b.Ref, b.USD, b.Tokens, int64(b.Window.Seconds()), action,
			b.WaitTimeout.Milliseconds(), us(s.now()))
		return interpret(err)
	})
	return errors.Wrapf(err, "set budget %s", b.Ref)
}

// BudgetList implements [store.Executor].
func (s *Store) BudgetList(ctx context.Context, p *store.BudgetListParams) ([]store.BudgetDef, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "BudgetList", p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list budgets")
	}
	defer rows.Close()
	var out []store.BudgetDef
	for rows.Next() {
		var d store.BudgetDef
		var window, waitMS, updated int64
		if err := rows.Scan(&d.Ref, &d.USD, &d.Tokens, &window, &d.OnExhausted, &waitMS, &updated); err != nil {
			return nil, errors.Wrap(interpret(err), "list budgets")
		}
		d.Window, d.WaitTimeout, d.UpdatedAt = time.Duration(window)*time.Second, time.Duration(waitMS)*time.Millisecond, fromUS(updated)
		out = append(out, d)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list budgets")
}

// BudgetDelete implements [store.Executor].
func (s *Store) BudgetDelete(ctx context.Context, p *store.BudgetDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "BudgetDelete", p.Namespace, p.Ref)
		if err != nil {
			return interpret(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Wrap(errors.CombineErrors(store.ErrNotFound, err), "no such budget")
		}
		return nil
	})
	return errors.Wrapf(err, "delete budget %s", p.Ref)
}

// BudgetWindowLock implements [store.Executor]: the store's one writer
// is the lock.
func (s *Store) BudgetWindowLock(ctx context.Context, p *store.BudgetWindowLockParams) ([]store.BudgetWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.BudgetWindow
	err := s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		for _, w := range p.Sorted() {
			got, err := scanWindow(tx.queryRow(ctx, "BudgetWindowLock", p.Namespace, w.Key.Ref, store.BudgetUnix(w.Key.Start), w.LimitUSD, w.LimitTokens, now))
			if err != nil {
				return err
			}
			out = append(out, got)
		}
		return nil
	})
	return out, errors.Wrap(err, "lock budget windows")
}

// BudgetWindowList implements [store.Executor].
func (s *Store) BudgetWindowList(ctx context.Context, p *store.BudgetWindowListParams) ([]store.BudgetWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.BudgetWindow
	for _, k := range p.Keys {
		w, err := scanWindow(s.q.queryRow(ctx, "BudgetWindowGet", p.Namespace, k.Ref, store.BudgetUnix(k.Start)))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, errors.Wrap(err, "list budget windows")
		}
		if !slices.ContainsFunc(out, func(o store.BudgetWindow) bool { return o.Key.Compare(w.Key) == 0 }) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b store.BudgetWindow) int { return a.Key.Compare(b.Key) })
	return out, nil
}

func scanWindow(row *sql.Row) (store.BudgetWindow, error) {
	var w store.BudgetWindow
	var start, updated int64
	err := row.Scan(&w.Key.Ref, &start, &w.LimitUSD, &w.LimitTokens, &w.RaisedUSD, &w.RaisedTokens, &w.SpentUSD, &w.SpentTokens,
		&w.ReservedUSD, &w.ReservedTokens, &updated)
	if err != nil {
		return w, interpret(err)
	}
	w.Key.Start, w.UpdatedAt = store.BudgetFromUnix(start), fromUS(updated)
	return w, nil
}

// BudgetWindowAdd implements [store.Executor].
func (s *Store) BudgetWindowAdd(ctx context.Context, p *store.BudgetWindowAddParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		for _, d := range store.SumDeltas(p.Deltas) {
			res, err := tx.exec(ctx, "BudgetWindowAdd", p.Namespace, d.Key.Ref, store.BudgetUnix(d.Key.Start), d.SpentUSD, d.SpentTokens,
				d.ReservedUSD, d.ReservedTokens, d.RaisedUSD, d.RaisedTokens, now)
			if err != nil {
				return interpret(err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Wrapf(errors.CombineErrors(store.ErrNotFound, err), "window %s not written (lock it first)", d.Key.Ref)
			}
		}
		return nil
	})
	return errors.Wrap(err, "add to budget windows")
}

// BudgetReservationInsert implements [store.Executor].
func (s *Store) BudgetReservationInsert(ctx context.Context, p *store.BudgetReservationInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	task := p.TaskID.String()
	err := s.tx(ctx, func(tx *txn) error {
		var n int
		if err := tx.queryRow(ctx, "BudgetReservationExists", task, p.Attempt, p.Position).Scan(&n); err != nil {
			return interpret(err)
		}
		if n > 0 {
			return errors.Wrap(store.ErrConflict, "the step holds a reservation already")
		}
		now := us(s.now())
		for _, e := range p.Entries {
			if _, err := tx.exec(ctx, "BudgetReservationInsert", task, p.Attempt, p.Position, p.Namespace, e.Key.Ref,
				store.BudgetUnix(e.Key.Start), e.USD, e.Tokens, now); err != nil {
				return interpret(err)
			}
		}
		return nil
	})
	return errors.Wrapf(err, "reserve for task %s step %d", p.TaskID, p.Position)
}

// BudgetReservationDelete implements [store.Executor].
func (s *Store) BudgetReservationDelete(ctx context.Context, p *store.BudgetReservationDeleteParams) ([]store.BudgetReservationEntry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.BudgetReservationEntry
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "BudgetReservationDelete", p.TaskID.String(), p.Attempt, p.Position)
		if err != nil {
			return interpret(err)
		}
		defer rows.Close()
		for rows.Next() {
			var e store.BudgetReservationEntry
			var start int64
			if err := rows.Scan(&e.Key.Ref, &start, &e.USD, &e.Tokens); err != nil {
				return interpret(err)
			}
			e.Key.Start = store.BudgetFromUnix(start)
			out = append(out, e)
		}
		return interpret(rows.Err())
	})
	slices.SortFunc(out, func(a, b store.BudgetReservationEntry) int { return a.Key.Compare(b.Key) })
	return out, errors.Wrapf(err, "settle task %s step %d", p.TaskID, p.Position)
}

// BudgetWaitInsert implements [store.Executor].
func (s *Store) BudgetWaitInsert(ctx context.Context, p *store.BudgetWaitParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "BudgetWaitInsert", p.Namespace, p.Key.Ref, store.BudgetUnix(p.Key.Start), p.TaskID.String())
		return interpret(err)
	})
	return errors.Wrapf(err, "record task %s waiting on budget %s", p.TaskID, p.Key.Ref)
}

// BudgetWaitTake implements [store.Executor].
func (s *Store) BudgetWaitTake(ctx context.Context, p *store.BudgetWaitParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []uuid.UUID
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "BudgetWaitTake", p.Namespace, p.Key.Ref, store.BudgetUnix(p.Key.Start))
		if err != nil {
			return interpret(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return interpret(err)
			}
			u, err := uuid.Parse(id)
			if err != nil {
				return err
			}
			out = append(out, u)
		}
		return interpret(rows.Err())
	})
	return out, errors.Wrapf(err, "take the tasks waiting on budget %s", p.Key.Ref)
}
