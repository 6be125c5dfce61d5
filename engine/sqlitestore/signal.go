package sqlitestore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskSignal implements [store.Store]: see [plan.Signal]. The append is
// EventAppend's, which announces work ready when the signal makes a
// waiting task due.
func (s *Store) TaskSignal(ctx context.Context, p *store.TaskSignalParams) (store.SignalResult, error) {
	return plan.Signal(ctx, s, p)
}

// TaskIDByKey returns the task holding an idempotency key in namespace,
// for [plan.Signal].
func (s *Store) TaskIDByKey(ctx context.Context, namespace, key string) (uuid.UUID, error) {
	var id string
	err := s.q.queryRow(ctx, "TaskIDByKey", namespace, key).Scan(&id)
	if err != nil {
		return uuid.Nil, errors.Wrapf(interpret(err), "find the task holding idempotency key %q", key)
	}
	return uuid.Parse(id)
}
