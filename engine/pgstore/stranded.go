package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
)

// StrandedReplace replaces a worker's findings of one type and version: a
// delete and an insert in one batch, one transaction.
func (s *Store) StrandedReplace(ctx context.Context, p *store.StrandedReplaceParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	n := len(p.Tasks)
	ids := make([][16]byte, n)
	kinds, recorded, called, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	positions := make([]int32, n)
	for i, t := range p.Tasks {
		ids[i], kinds[i], positions[i], recorded[i], called[i], errs[i] = t.TaskID, t.Kind, int32(t.Position), t.Recorded, t.Called, t.Error
	}
	key := pgx.NamedArgs{"namespace": p.Namespace, "type": p.Type, "version": p.Version, "worker_id": p.WorkerID}
	batch := &pgx.Batch{}
	batch.Queue(s.sql("StrandedDelete"), key)
	if n > 0 {
		batch.Queue(s.sql("StrandedInsert"), pgx.NamedArgs{"namespace": p.Namespace, "type": p.Type, "version": p.Version,
			"worker_id": p.WorkerID, "task_ids": ids, "kinds": kinds, "positions": positions, "recorded": recorded,
			"called": called, "errors": errs})
	}
	err := s.db.SendBatch(ctx, batch).Close()
	return errors.Wrapf(interpretError(err), "replace stranded tasks of %s@%d", p.Type, p.Version)
}

// StrandedList lists the findings of tasks not finished.
func (s *Store) StrandedList(ctx context.Context, p *store.StrandedListParams) ([]store.StrandedTask, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("StrandedList"), pgx.NamedArgs{"namespace": p.Namespace, "type": p.Type, "queue": p.Queue, "limit": p.Limit})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list stranded tasks")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.StrandedTask, error) {
		var t store.StrandedTask
		err := row.Scan(&t.Namespace, &t.Type, &t.Version, &t.WorkerID, &t.TaskID, &t.Kind, &t.Position, &t.Recorded,
			&t.Called, &t.Error, &t.FoundAt, &t.Status, &t.RunAt, &t.Queue)
		t.FoundAt, t.RunAt = t.FoundAt.UTC(), t.RunAt.UTC()
		return t, err
	})
	return out, errors.Wrap(interpretError(err), "list stranded tasks")
}
