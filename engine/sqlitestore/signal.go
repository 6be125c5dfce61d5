package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
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

// SignalSeen implements [plan.SignalDriver].
func (s *Store) SignalSeen(ctx context.Context, id uuid.UUID, dedupID string) (bool, error) {
	var seen bool
	err := s.q.queryRow(ctx, "SignalSeen", id.String(), dedupID).Scan(&seen)
	return seen, errors.Wrap(interpret(err), "look up a signal's dedup id")
}

// OpenWait implements [plan.SignalDriver].
func (s *Store) OpenWait(ctx context.Context, id uuid.UUID, lastSeq int64) (*history.WaitStartedData, error) {
	var data []byte
	err := s.q.queryRow(ctx, "WaitOpen", id.String(), lastSeq).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrap(interpret(err), "read the wait a task is in")
	}
	return plan.DecodeWait(data)
}
