package maintenance

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
)

// RemoveFinished removes, in one transaction of ex (a nested one in a
// [store.Tx]), up to p.Max tasks of p.Namespace that finished before
// p.Before (completed, failed, cancelled, dead-lettered, expired), oldest
// first, each with its whole log and its blobs; never a task with a child
// not yet finished, nor a child whose parent has not finished. Their
// idempotency keys stay taken until p.KeysUntil; up to p.Max retired keys
// past their time are dropped. With p.Only, only the tasks it names, each
// only at its last seq there (what an archive holds of it).
//
// The transaction drops the expired retired keys, lists the removable
// tasks locked (skipping those a writer holds: they wait for the next
// pass) and removes them. It is retention's and the archiver's removal,
// written once over the seam's statements.
func RemoveFinished(ctx context.Context, ex store.Executor, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	if p.Max <= 0 {
		return store.RemoveResult{}, nil
	}
	res, err := removeFinishedTx(ctx, ex, p)
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(err, "remove finished tasks of namespace %s", p.Namespace)
	}
	return res, nil
}

func removeFinishedTx(ctx context.Context, ex store.Executor, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	tx, err := ex.Begin(ctx)
	if err != nil {
		return store.RemoveResult{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.RetiredKeyDeleteExpired(ctx, &store.RetiredKeyDeleteExpiredParams{Max: p.Max}); err != nil {
		return store.RemoveResult{}, err
	}
	found, err := tx.TaskRemovableList(ctx, &store.TaskRemovableListParams{
		Namespace: p.Namespace, Before: p.Before, TypeBefore: p.TypeBefore, Max: p.Max, Only: p.Only, Lock: true,
	})
	if err != nil {
		return store.RemoveResult{}, err
	}
	res, err := tx.TaskRemoveMany(ctx, &store.TaskRemoveManyParams{Namespace: p.Namespace, Tasks: found, KeysUntil: p.KeysUntil})
	if err != nil {
		return store.RemoveResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return store.RemoveResult{}, err
	}
	return res, nil
}
