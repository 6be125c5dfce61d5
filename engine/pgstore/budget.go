package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	var n int
	err := s.db.QueryRow(ctx, s.sql("BudgetSet"), pgx.NamedArgs{
		"namespace": p.Namespace, "ref": b.Ref, "usd": b.USD, "tokens": b.Tokens, "window_seconds": int64(b.Window.Seconds()),
		"on_exhausted": action, "wait_timeout_ms": b.WaitTimeout.Milliseconds(), "now": s.now(), "max": store.MaxBudgets,
	}).Scan(&n)
	if err == nil && n == 0 {
		return errmark.Mark(errors.Newf("set budget %s: namespace %s holds %d budgets already, the most it may",
			b.Ref, p.Namespace, store.MaxBudgets), store.ErrConflict)
	}
	return errors.Wrapf(interpretError(err), "set budget %s", b.Ref)
}

// BudgetList implements [store.Executor].
func (s *Store) BudgetList(ctx context.Context, p *store.BudgetListParams) ([]store.BudgetDef, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetList"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list budgets")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BudgetDef, error) {
		var d store.BudgetDef
		var window, waitMS int64
		err := row.Scan(&d.Ref, &d.USD, &d.Tokens, &window, &d.OnExhausted, &waitMS, &d.UpdatedAt)
		d.Window, d.WaitTimeout = secondsOf(window), millisOf(waitMS)
		d.UpdatedAt = d.UpdatedAt.UTC()
		return d, err
	})
	return out, errors.Wrap(interpretError(err), "list budgets")
}

// BudgetDelete implements [store.Executor].
func (s *Store) BudgetDelete(ctx context.Context, p *store.BudgetDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.sql("BudgetDelete"), pgx.NamedArgs{"namespace": p.Namespace, "ref": p.Ref})
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.Wrap(store.ErrNotFound, "no such budget")
	}
	return errors.Wrapf(interpretError(err), "delete budget %s", p.Ref)
}

// BudgetWindowLock implements [store.Executor].
func (s *Store) BudgetWindowLock(ctx context.Context, p *store.BudgetWindowLockParams) ([]store.BudgetWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ws := p.Sorted()
	refs, starts, usds, tokens := make([]string, len(ws)), make([]int64, len(ws)), make([]float64, len(ws)), make([]int64, len(ws))
	for i, w := range ws {
		refs[i], starts[i], usds[i], tokens[i] = w.Key.Ref, store.BudgetUnix(w.Key.Start), w.LimitUSD, w.LimitTokens
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetWindowLock"), pgx.NamedArgs{
		"namespace": p.Namespace, "refs": refs, "starts": starts, "usds": usds, "tokens": tokens, "now": s.now(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "lock budget windows")
	}
	out, err := collectWindows(rows)
	return out, errors.Wrap(interpretError(err), "lock budget windows")
}

// BudgetWindowList implements [store.Executor].
func (s *Store) BudgetWindowList(ctx context.Context, p *store.BudgetWindowListParams) ([]store.BudgetWindow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	refs, starts := make([]string, len(p.Keys)), make([]int64, len(p.Keys))
	for i, k := range p.Keys {
		refs[i], starts[i] = k.Ref, store.BudgetUnix(k.Start)
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetWindowList"), pgx.NamedArgs{"namespace": p.Namespace, "refs": refs, "starts": starts})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list budget windows")
	}
	out, err := collectWindows(rows)
	return out, errors.Wrap(interpretError(err), "list budget windows")
}

func collectWindows(rows pgx.Rows) ([]store.BudgetWindow, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BudgetWindow, error) {
		var w store.BudgetWindow
		var start int64
		err := row.Scan(&w.Key.Ref, &start, &w.LimitUSD, &w.LimitTokens, &w.RaisedUSD, &w.RaisedTokens, &w.SpentUSD, &w.SpentTokens,
			&w.ReservedUSD, &w.ReservedTokens, &w.UpdatedAt)
		w.Key.Start, w.UpdatedAt = store.BudgetFromUnix(start), w.UpdatedAt.UTC()
		return w, err
	})
	// RETURNING's order is not the insert's.
	slices.SortFunc(out, func(a, b store.BudgetWindow) int { return a.Key.Compare(b.Key) })
	return out, err
}

// BudgetWindowAdd implements [store.Executor].
func (s *Store) BudgetWindowAdd(ctx context.Context, p *store.BudgetWindowAddParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	ds := store.SumDeltas(p.Deltas)
	if len(ds) == 0 {
		return nil
	}
	n := len(ds)
	refs, starts := make([]string, n), make([]int64, n)
	spentUSD, reservedUSD, raisedUSD := make([]float64, n), make([]float64, n), make([]float64, n)
	spentTok, reservedTok, raisedTok := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, d := range ds {
		refs[i], starts[i] = d.Key.Ref, store.BudgetUnix(d.Key.Start)
		spentUSD[i], reservedUSD[i], raisedUSD[i] = d.SpentUSD, d.ReservedUSD, d.RaisedUSD
		spentTok[i], reservedTok[i], raisedTok[i] = d.SpentTokens, d.ReservedTokens, d.RaisedTokens
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetWindowAdd"), pgx.NamedArgs{
		"namespace": p.Namespace, "refs": refs, "starts": starts, "spent_usd": spentUSD, "spent_tokens": spentTok,
		"reserved_usd": reservedUSD, "reserved_tokens": reservedTok, "raised_usd": raisedUSD, "raised_tokens": raisedTok, "now": s.now(),
	})
	if err != nil {
		return errors.Wrap(interpretError(err), "add to budget windows")
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err == nil && len(found) != n {
		err = errors.Wrapf(store.ErrNotFound, "%d of %d windows not written (lock them first)", n-len(found), n)
	}
	return errors.Wrap(interpretError(err), "add to budget windows")
}

// BudgetReservationInsert implements [store.Executor].
func (s *Store) BudgetReservationInsert(ctx context.Context, p *store.BudgetReservationInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	n := len(p.Entries)
	refs, starts, usds, tokens := make([]string, n), make([]int64, n), make([]float64, n), make([]int64, n)
	for i, e := range p.Entries {
		refs[i], starts[i], usds[i], tokens[i] = e.Key.Ref, store.BudgetUnix(e.Key.Start), e.USD, e.Tokens
	}
	tag, err := s.db.Exec(ctx, s.sql("BudgetReservationInsert"), pgx.NamedArgs{
		"task_id": p.TaskID, "attempt": p.Attempt, "position": p.Position, "namespace": p.Namespace,
		"refs": refs, "starts": starts, "usds": usds, "tokens": tokens, "now": s.now(),
	})
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.Wrap(store.ErrConflict, "the step holds a reservation already")
	}
	return errors.Wrapf(interpretError(err), "reserve for task %s step %d", p.TaskID, p.Position)
}

// BudgetReservationDelete implements [store.Executor].
func (s *Store) BudgetReservationDelete(ctx context.Context, p *store.BudgetReservationDeleteParams) ([]store.BudgetReservationEntry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetReservationDelete"), pgx.NamedArgs{"task_id": p.TaskID, "attempt": p.Attempt, "position": p.Position})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "settle task %s step %d", p.TaskID, p.Position)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BudgetReservationEntry, error) {
		var e store.BudgetReservationEntry
		var start int64
		err := row.Scan(&e.Key.Ref, &start, &e.USD, &e.Tokens)
		e.Key.Start = store.BudgetFromUnix(start)
		return e, err
	})
	slices.SortFunc(out, func(a, b store.BudgetReservationEntry) int { return a.Key.Compare(b.Key) })
	return out, errors.Wrapf(interpretError(err), "settle task %s step %d", p.TaskID, p.Position)
}

// BudgetWaitInsert implements [store.Executor].
func (s *Store) BudgetWaitInsert(ctx context.Context, p *store.BudgetWaitParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql("BudgetWaitInsert"), pgx.NamedArgs{
		"namespace": p.Namespace, "ref": p.Key.Ref, "start": store.BudgetUnix(p.Key.Start), "task_id": p.TaskID,
	})
	return errors.Wrapf(interpretError(err), "record task %s waiting on budget %s", p.TaskID, p.Key.Ref)
}

// BudgetWaitTake implements [store.Executor].
func (s *Store) BudgetWaitTake(ctx context.Context, p *store.BudgetWaitParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("BudgetWaitTake"), pgx.NamedArgs{
		"namespace": p.Namespace, "ref": p.Key.Ref, "start": store.BudgetUnix(p.Key.Start),
	})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "take the tasks waiting on budget %s", p.Key.Ref)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return ids, errors.Wrapf(interpretError(err), "take the tasks waiting on budget %s", p.Key.Ref)
}

func secondsOf(n int64) time.Duration { return time.Duration(n) * time.Second }
func millisOf(n int64) time.Duration  { return time.Duration(n) * time.Millisecond }
