package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// TaskSignal implements [store.Store]: see [plan.Signal]. The append is
// EventAppend's statement, which wakes workers on the ready channel when
// the signal makes a waiting task due.
func (s *Store) TaskSignal(ctx context.Context, p *store.TaskSignalParams) (store.SignalResult, error) {
	return plan.Signal(ctx, s, p)
}

// TaskIDByKey returns the task holding an idempotency key in namespace,
// for [plan.Signal].
func (s *Store) TaskIDByKey(ctx context.Context, namespace, key string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.db.QueryRow(ctx, s.sql("TaskIDByKey"), pgx.NamedArgs{
		"namespace": namespace, "idempotency_key": key,
	}).Scan(&id)
	if err != nil {
		return uuid.Nil, errors.Wrapf(interpretError(err), "find the task holding idempotency key %q", key)
	}
	return id, nil
}

// SignalSeen implements [plan.SignalDriver].
func (s *Store) SignalSeen(ctx context.Context, id uuid.UUID, dedupID string) (bool, error) {
	var seen bool
	err := s.db.QueryRow(ctx, s.sql("SignalSeen"), pgx.NamedArgs{"task_id": id, "dedup_id": dedupID}).Scan(&seen)
	return seen, errors.Wrap(interpretError(err), "look up a signal's dedup id")
}

// OpenWait implements [plan.SignalDriver].
func (s *Store) OpenWait(ctx context.Context, id uuid.UUID, lastSeq int64) (*history.WaitStartedData, error) {
	var data []byte
	err := s.db.QueryRow(ctx, s.sql("WaitOpen"), pgx.NamedArgs{"task_id": id, "last_seq": lastSeq}).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "read the wait a task is in")
	}
	return plan.DecodeWait(data)
}
