package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskRemoveFinished implements [store.Store] in one write transaction:
// the removable tasks are listed in removing, which lets the append-only
// trigger delete their events, and the list is emptied before the commit.
func (s *Store) TaskRemoveFinished(ctx context.Context, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	var res store.RemoveResult
	if p.Max <= 0 {
		return res, nil
	}
	err := s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		if _, err := tx.exec(ctx, "RetiredKeysExpire", now, p.Max); err != nil {
			return err
		}
		rows, err := tx.query(ctx, "TaskRemovable", p.Namespace, us(p.Before), p.Max)
		if err != nil {
			return err
		}
		type removable struct {
			id, typ string
			key     sql.NullString
			input   []byte
		}
		var found []removable
		for rows.Next() {
			var r removable
			if err := rows.Scan(&r.id, &r.key, &r.typ, &r.input); err != nil {
				_ = rows.Close()
				return err
			}
			found = append(found, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		ids := make([]uuid.UUID, len(found))
		for i, r := range found {
			if ids[i], err = uuid.Parse(r.id); err != nil {
				return err
			}
			if !r.key.Valid || !p.KeysUntil.After(s.now()) {
				continue
			}
			if _, err := tx.exec(ctx, "RetiredKeyInsert", p.Namespace, r.key.String, r.id, r.typ, plan.InputDigest(r.input), now, us(p.KeysUntil)); err != nil {
				return err
			}
		}
		if _, err := tx.exec(ctx, "RemovingMark", jsonIDs(ids)); err != nil {
			return err
		}
		evs, err := tx.exec(ctx, "EventsRemove")
		if err != nil {
			return err
		}
		tasks, err := tx.exec(ctx, "TasksRemove")
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "RemovingClear"); err != nil {
			return err
		}
		nEvents, _ := evs.RowsAffected()
		nTasks, _ := tasks.RowsAffected()
		res = store.RemoveResult{Tasks: int(nTasks), Events: int(nEvents)}
		return nil
	})
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(interpret(err), "remove finished tasks of namespace %s", p.Namespace)
	}
	if s.metrics != nil && res.Tasks > 0 {
		s.metrics.ObserveRemoved(p.Namespace, res)
	}
	return res, nil
}

// NamespaceSet implements [store.Store].
func (s *Store) NamespaceSet(ctx context.Context, c store.NamespaceConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	_, err := s.q.exec(ctx, "NamespaceUpsert", c.Name, nullMillis(c.Retention), nullMillis(c.KeyRetention), us(s.now()))
	return errors.Wrapf(interpret(err), "set namespace %s", c.Name)
}

// NamespaceList implements [store.Store].
func (s *Store) NamespaceList(ctx context.Context) ([]store.NamespaceConfig, error) {
	rows, err := s.q.query(ctx, "NamespaceList")
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list namespaces")
	}
	defer rows.Close()
	var out []store.NamespaceConfig
	for rows.Next() {
		var c store.NamespaceConfig
		var retention, keyRetention, oldest sql.NullInt64
		if err := rows.Scan(&c.Name, &retention, &keyRetention, &oldest); err != nil {
			return nil, errors.Wrap(interpret(err), "list namespaces")
		}
		if oldest.Valid {
			c.OldestFinished = fromUS(oldest.Int64)
		}
		c.Retention = time.Duration(retention.Int64) * time.Millisecond
		c.KeyRetention = time.Duration(keyRetention.Int64) * time.Millisecond
		out = append(out, c)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list namespaces")
}

// nullMillis is d in milliseconds, NULL for 0.
func nullMillis(d time.Duration) sql.NullInt64 {
	return sql.NullInt64{Int64: d.Milliseconds(), Valid: d > 0}
}
