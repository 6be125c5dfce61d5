package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
)

// TaskDataKeys implements [store.Store].
func (s *Store) TaskDataKeys(ctx context.Context, p *store.TaskDataKeysParams) (map[uuid.UUID][]byte, error) {
	ids := p.IDs
	out := make(map[uuid.UUID][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.q.query(ctx, "TaskDataKeys", jsonIDs(ids), p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "read data keys")
	}
	defer rows.Close()
	for rows.Next() {
		var idText string
		var key []byte
		if err := rows.Scan(&idText, &key); err != nil {
			return nil, errors.Wrap(interpret(err), "read data keys")
		}
		id, err := uuid.Parse(idText)
		if err != nil {
			return nil, errors.Wrapf(err, "data key of task %q", idText)
		}
		out[id] = key
	}
	return out, errors.Wrap(interpret(rows.Err()), "read data keys")
}

// TaskDataKeySet implements [store.Store].
func (s *Store) TaskDataKeySet(ctx context.Context, p *store.TaskDataKeySetParams) ([]byte, error) {
	id, key := p.ID, p.DataKey
	var held []byte
	err := s.tx(ctx, func(tx *txn) error {
		if _, err := tx.exec(ctx, "TaskDataKeySet", id.String(), key); err != nil {
			return err
		}
		err := tx.queryRow(ctx, "TaskDataKeyGet", id.String()).Scan(&held)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // gone: no key
		}
		return err
	})
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "set the data key of task %s", id)
	}
	return held, nil
}

// nullBlob is b as a BLOB parameter, NULL when empty.
func nullBlob(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
