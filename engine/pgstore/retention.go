package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskRemoveFinished implements [store.Store]: one transaction locks the
// removable tasks (SKIP LOCKED, so a task a writer holds waits for the
// next pass), retires their keys and deletes their events and rows.
func (s *Store) TaskRemoveFinished(ctx context.Context, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	var res store.RemoveResult
	if p.Max <= 0 {
		return res, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql("RetiredKeysExpire"), pgx.NamedArgs{"max": p.Max}); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, s.sql("TaskRemovableLock"), pgx.NamedArgs{
			"namespace": p.Namespace, "before": p.Before, "max": p.Max,
		})
		if err != nil {
			return err
		}
		var ids [][16]byte
		var keys []*string
		var types []string
		var digests [][]byte
		var id [16]byte
		var key *string
		var typ string
		var input []byte
		if _, err := pgx.ForEachRow(rows, []any{&id, &key, &typ, &input}, func() error {
			ids, keys, types = append(ids, id), append(keys, key), append(types, typ)
			digests = append(digests, plan.InputDigest(input))
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		// The append-only trigger lets this transaction delete events.
		if _, err := tx.Exec(ctx, "SELECT set_config('cairn.retention', 'on', true)"); err != nil {
			return err
		}
		var keysUntil any // NULL: keys are freed with their tasks
		if !p.KeysUntil.IsZero() {
			keysUntil = p.KeysUntil
		}
		var tasks, events int64
		err = tx.QueryRow(ctx, s.sql("TaskRemove"), pgx.NamedArgs{
			"namespace": p.Namespace, "ids": ids, "keys": keys, "types": types, "digests": digests, "keys_until": keysUntil,
		}).Scan(&tasks, &events)
		res = store.RemoveResult{Tasks: int(tasks), Events: int(events)}
		return err
	})
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(interpretError(err), "remove finished tasks of namespace %s", p.Namespace)
	}
	return res, nil
}
