package sqlitestore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// StrandedReplace implements [store.Store].
func (s *Store) StrandedReplace(ctx context.Context, p *store.StrandedReplaceParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return errors.Wrapf(s.tx(ctx, func(tx *txn) error {
		if _, err := tx.exec(ctx, "StrandedDelete", p.Namespace, p.Type, p.Version, p.WorkerID); err != nil {
			return interpret(err)
		}
		now := us(s.now())
		for _, t := range p.Tasks {
			if _, err := tx.exec(ctx, "StrandedInsert", p.Namespace, p.Type, p.Version, p.WorkerID, t.TaskID.String(),
				t.Kind, t.Position, t.Recorded, t.Called, t.Error, now); err != nil {
				return interpret(err)
			}
		}
		return nil
	}), "replace stranded tasks of %s@%d", p.Type, p.Version)
}

// StrandedList implements [store.Store].
func (s *Store) StrandedList(ctx context.Context, p *store.StrandedListParams) ([]store.StrandedTask, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "StrandedList", p.Namespace, p.Type, p.Limit, p.Queue)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list stranded tasks")
	}
	defer rows.Close()
	var out []store.StrandedTask
	for rows.Next() {
		var t store.StrandedTask
		var id, status string
		var found, runAt int64
		if err := rows.Scan(&t.Namespace, &t.Type, &t.Version, &t.WorkerID, &id, &t.Kind, &t.Position, &t.Recorded,
			&t.Called, &t.Error, &found, &status, &runAt, &t.Queue); err != nil {
			return nil, err
		}
		if t.TaskID, err = uuid.Parse(id); err != nil {
			return nil, errors.Wrap(err, "list stranded tasks")
		}
		t.Status, t.FoundAt, t.RunAt = history.Status(status), fromUS(found), fromUS(runAt)
		out = append(out, t)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list stranded tasks")
}
