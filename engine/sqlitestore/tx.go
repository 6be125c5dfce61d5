package sqlitestore

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// A transaction is the store bound to a txn: a copy of the Store whose
// named queries run in the transaction (q), whose counts and announcements
// wait for the commit (metrics, announce), and which knows its
// transaction (cur). Every statement method is written once, over s.q and
// s.tx: on the store itself those are the statement cache and a BEGIN
// IMMEDIATE of its own; in a bound store, the transaction and a savepoint
// in it.
//
// The store has one connection, which a transaction holds from Begin to
// its end, with SQLite's write lock (BEGIN IMMEDIATE): the store's other
// callers wait for the connection meanwhile, so writes stay serialized
// and a claim in a transaction races nothing.

// txState is a transaction's own: the txn its statements run in (shared by
// the transactions nested in it), its savepoint when it is nested, what
// waits for its commit, and the transaction it is nested in (nil for the
// outermost).
type txState struct {
	t         *txn
	savepoint string // "" for the outermost
	depth     int    // how many transactions it is nested in
	after     plan.AfterCommit
	outer     *txState
	done      bool // committed or rolled back
}

// txStore is a [store.Tx]: the store bound to a transaction.
type txStore struct {
	*Store
}

var _ store.Tx = txStore{}

// Begin opens a write transaction on the store's one connection (BEGIN
// IMMEDIATE), which it holds until it ends; on a store bound to a
// transaction, a savepoint in it. See [store.Executor].
func (s *Store) Begin(ctx context.Context) (store.Tx, error) {
	if s.cur != nil {
		depth := s.cur.depth + 1
		name := "cairn_tx_" + strconv.Itoa(depth)
		if _, err := s.cur.t.tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
			return nil, errors.Wrap(interpret(err), "begin a nested transaction")
		}
		return s.bind(&txState{t: s.cur.t, savepoint: name, depth: depth, outer: s.cur}), nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "begin a transaction")
	}
	return s.bind(&txState{t: &txn{tx: tx, cache: s.cache}}), nil
}

// bind returns the store bound to st.
func (s *Store) bind(st *txState) txStore {
	bound := *s
	bound.q, bound.cur = st.t, st
	bound.metrics = st.after.Observer(s.observer)
	return txStore{&bound}
}

// Commit commits the transaction (a nested one releases its savepoint),
// then runs what waited for it: counts, announcements, and the
// preparation of what it ran unprepared.
func (t txStore) Commit(ctx context.Context) error {
	st := t.cur
	if st.done {
		return errors.Wrap(sql.ErrTxDone, "commit the transaction")
	}
	st.done = true
	if st.outer != nil {
		if _, err := st.t.tx.ExecContext(ctx, "RELEASE "+st.savepoint); err != nil {
			st.after.Discard()
			return errors.Wrap(interpret(err), "commit the nested transaction")
		}
		st.after.MoveTo(&st.outer.after)
		return nil
	}
	if err := st.t.tx.Commit(); err != nil {
		st.after.Discard()
		return errors.Wrap(interpret(err), "commit the transaction")
	}
	t.prepareMissed(ctx, st.t)
	st.after.Run()
	return nil
}

// Rollback rolls the transaction back (a nested one to its savepoint);
// nil if it has ended already.
func (t txStore) Rollback(ctx context.Context) error {
	st := t.cur
	if st.done {
		return nil
	}
	st.done = true
	st.after.Discard()
	if st.outer != nil {
		// ROLLBACK TO leaves the savepoint open: RELEASE ends it.
		_, err := st.t.tx.ExecContext(ctx, "ROLLBACK TO "+st.savepoint+"; RELEASE "+st.savepoint)
		return errors.Wrap(interpret(err), "roll back the nested transaction")
	}
	err := st.t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) { // database/sql rolled it back when its context ended
		err = nil
	}
	t.prepareMissed(ctx, st.t)
	return errors.Wrap(interpret(err), "roll back the transaction")
}

// inSavepoint runs fn in a savepoint of the transaction: what
// [Store.tx] opens on a store bound to one.
func (st *txState) inSavepoint(ctx context.Context, fn func(*txn) error) error {
	name := "cairn_sp_" + strconv.Itoa(st.depth+1)
	if _, err := st.t.tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return interpret(err)
	}
	if err := fn(st.t); err != nil {
		if _, rbErr := st.t.tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO "+name+"; RELEASE "+name); rbErr != nil {
			return errors.CombineErrors(err, interpret(rbErr))
		}
		return err
	}
	_, err := st.t.tx.ExecContext(ctx, "RELEASE "+name)
	return interpret(err)
}
