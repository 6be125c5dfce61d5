package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// A transaction is the store bound to a pgx.Tx: a copy of the Store whose
// statements run on the transaction (db and control), whose counts wait
// for the commit (metrics), and which knows its transaction (txn). Every
// statement method is written once, over s.db: on the store itself it is
// the pool, and what opens a transaction of its own there (pgx.BeginFunc
// on s.db) opens a savepoint in a bound store. PostgreSQL delivers the
// NOTIFYs the statements send when the transaction commits, and drops
// them when it rolls back.

// txState is a transaction's own: its pgx.Tx, what waits for its commit,
// and the transaction it is nested in (nil for the outermost).
type txState struct {
	tx    pgx.Tx
	after plan.AfterCommit
	outer *txState
}

// txStore is a [store.Tx]: the store bound to a transaction.
type txStore struct {
	*Store
}

var _ store.Tx = txStore{}

// Begin opens a transaction on a connection of the pool; on a store bound
// to a transaction, a savepoint in it. See [store.Executor].
func (s *Store) Begin(ctx context.Context) (store.Tx, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "begin a transaction")
	}
	return s.bind(tx, s.txn), nil
}

// WithTx returns the store's statements run in tx, the caller's
// transaction (the outbox: a task started in tx exists, and workers hear
// of it, only if tx commits), as River's UnwrapExecutor does. The caller
// may commit tx itself or through the returned Tx: both commit the same
// writes and deliver their notifications, but only the returned Tx's
// Commit has the store's observer (Config.Metrics) count them. Methods
// that would open a transaction of their own open a savepoint in tx.
// tx must be on a connection to the store's database; its search_path
// does not matter (every statement names the schema).
func (s *Store) WithTx(tx pgx.Tx) store.Tx { return s.bind(tx, nil) }

// bind returns the store bound to tx, nested in outer (nil: outermost).
func (s *Store) bind(tx pgx.Tx, outer *txState) txStore {
	st := &txState{tx: tx, outer: outer}
	bound := *s
	if _, ok := tx.(positionalTx); !ok {
		tx = positionalTx{Tx: tx, pos: s.pos} // a caller's (WithTx)
	}
	bound.db, bound.control, bound.txn = tx, tx, st
	bound.metrics = st.after.Observer(s.observer)
	return txStore{&bound}
}

// afterCommit runs fn once the store's writes so far have committed: at
// once on the store itself, after the outermost commit in a transaction
// (never, if it rolls back).
func (s *Store) afterCommit(fn func()) {
	if s.txn == nil {
		fn()
		return
	}
	s.txn.after.Do(fn)
}

// Commit commits the transaction (a nested one releases its savepoint),
// then runs what waited for it.
func (t txStore) Commit(ctx context.Context) error {
	st := t.txn
	if err := st.tx.Commit(ctx); err != nil {
		st.after.Discard()
		return errors.Wrap(interpretError(err), "commit the transaction")
	}
	if st.outer != nil {
		st.after.MoveTo(&st.outer.after)
		return nil
	}
	st.after.Run()
	return nil
}

// Rollback rolls the transaction back (a nested one to its savepoint);
// nil if it has ended already.
func (t txStore) Rollback(ctx context.Context) error {
	st := t.txn
	st.after.Discard()
	err := st.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return errors.Wrap(interpretError(err), "roll back the transaction")
}

// readTx runs fn, which only reads, in a transaction of opts on the pool,
// or, on a store bound to a transaction, in a savepoint of it (whose
// isolation and access mode are the transaction's) rolled back after fn:
// the settings fn makes for itself (set_config's statement_timeout) end
// with it instead of staying in the caller's transaction.
func (s *Store) readTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if s.txn == nil {
		return pgx.BeginTxFunc(ctx, s.pool, opts, fn)
	}
	sp, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	err = fn(sp)
	if rbErr := sp.Rollback(ctx); err == nil {
		err = rbErr
	}
	return err
}
