package engine

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// TaskType is a task type at one version that a worker has registered in a
// namespace, with the defaults its definition gives: what a producer that
// does not link the workflow code (the HTTP API) may start, and how.
type TaskType struct {
	Namespace       string        `json:"namespace"`
	Type            string        `json:"type"`
	Version         int           `json:"version"`
	Queue           string        `json:"queue"`
	MaxAttempts     int           `json:"max_attempts"`                // 0: no limit
	ScheduleToClose time.Duration `json:"schedule_to_close,omitempty"` // 0: none
	RegisteredBy    string        `json:"registered_by"`
	RegisteredAt    time.Time     `json:"registered_at"`
}

// TaskTypeRegister records types (all of namespace) as registered by
// worker. A type already registered takes these defaults.
func (s *PGStore) TaskTypeRegister(ctx context.Context, namespace, worker string, types []TaskType) error {
	n := len(types)
	if n == 0 {
		return nil
	}
	names, queues := make([]string, n), make([]string, n)
	versions, attempts := make([]int32, n), make([]int32, n)
	scheduleToClose := make([]*int64, n)
	for i, t := range types {
		names[i], queues[i], versions[i], attempts[i] = t.Type, t.Queue, int32(t.Version), int32(t.MaxAttempts)
		if t.ScheduleToClose > 0 {
			scheduleToClose[i] = ptr(t.ScheduleToClose.Milliseconds())
		}
	}
	_, err := s.pool.Exec(ctx, s.sql("TaskTypeRegister"), pgx.NamedArgs{
		"namespace": namespace, "registered_by": worker, "types": names, "versions": versions,
		"queues": queues, "max_attempts": attempts, "schedule_to_close_ms": scheduleToClose,
	})
	return errors.Wrap(interpretError(err), "register task types")
}

// TaskTypeList returns the task types registered in namespace, by name and
// version.
func (s *PGStore) TaskTypeList(ctx context.Context, namespace string) ([]TaskType, error) {
	rows, err := s.pool.Query(ctx, s.sql("TaskTypeList"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list task types")
	}
	types, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TaskType, error) {
		var t TaskType
		var scheduleToCloseMS *int64
		err := row.Scan(&t.Namespace, &t.Type, &t.Version, &t.Queue, &t.MaxAttempts, &scheduleToCloseMS, &t.RegisteredBy, &t.RegisteredAt)
		t.ScheduleToClose = time.Duration(deref(scheduleToCloseMS)) * time.Millisecond
		t.RegisteredAt = t.RegisteredAt.UTC()
		return t, err
	})
	return types, errors.Wrap(interpretError(err), "list task types")
}
