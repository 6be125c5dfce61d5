package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
)

// TaskDataKeys implements [store.Store].
func (s *Store) TaskDataKeys(ctx context.Context, p *store.TaskDataKeysParams) (map[uuid.UUID][]byte, error) {
	ids := p.IDs
	out := make(map[uuid.UUID][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, s.sql("TaskDataKeys"), pgx.NamedArgs{"namespace": p.Namespace, "ids": ids})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read data keys")
	}
	var id uuid.UUID
	var key []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error {
		out[id] = key
		key = nil // Scan reuses the slice otherwise
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read data keys")
	}
	return out, nil
}

// TaskDataKeySet implements [store.Store].
func (s *Store) TaskDataKeySet(ctx context.Context, p *store.TaskDataKeySetParams) ([]byte, error) {
	var held []byte
	err := s.db.QueryRow(ctx, s.sql("TaskDataKeySet"), pgx.NamedArgs{"id": p.ID, "data_key": p.DataKey}).Scan(&held)
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "set the data key of task %s", p.ID)
	}
	return held, nil
}
