package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TypeKey names a task type at one version: what a worker can run.
type TypeKey struct {
	Type    string
	Version int
}

func (k TypeKey) String() string { return k.Type + "@" + strconv.Itoa(k.Version) }

// TaskClaimManyParams describes a claim.
type TaskClaimManyParams struct {
	Namespace string
	Queues    []string
	Types     []TypeKey // only tasks of these types and versions are claimed
	Owner     string    // the worker id recorded as lease owner
	Max       int       // claim at most this many
	LeaseTTL  time.Duration
}

// ClaimedTask is a task a worker now holds under a lease, with its history.
type ClaimedTask struct {
	Task   *Task
	Events []history.Event
	State  history.State // Replay(Events); Status is running
}

// TaskClaimMany claims up to p.Max due tasks in one statement (FOR UPDATE
// SKIP LOCKED, new lease epoch, attempt_started appended), then loads their
// histories in a second statement of the same transaction, so a claim whose
// histories cannot be loaded is rolled back instead of leaving its tasks
// leased by nobody.
func (s *Store) TaskClaimMany(ctx context.Context, p *TaskClaimManyParams) ([]*ClaimedTask, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	var out []*ClaimedTask
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.taskClaimMany(ctx, tx, p)
		return err
	})
	return out, err
}

func (s *Store) taskClaimMany(ctx context.Context, q Querier, p *TaskClaimManyParams) ([]*ClaimedTask, error) {
	keys := make([]string, len(p.Types))
	for i, k := range p.Types {
		keys[i] = k.String()
	}
	rows, err := q.Query(ctx, s.sql("TaskClaimMany"), pgx.NamedArgs{
		"namespace": p.Namespace, "queues": p.Queues, "type_keys": keys, "max": p.Max,
		"owner": p.Owner, "lease_seconds": p.LeaseTTL.Seconds(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "claim tasks")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "claim tasks")
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	byTask, err := s.eventsQuery(ctx, q, s.sql("EventListByTasks"), pgx.NamedArgs{"ids": ids})
	if err != nil {
		return nil, errors.Wrap(err, "load claimed histories")
	}
	out := make([]*ClaimedTask, 0, len(tasks))
	for _, t := range tasks {
		events := byTask[t.ID]
		state, err := history.Replay(events)
		if err != nil {
			return nil, errors.Wrapf(err, "replay claimed task %s", t.ID)
		}
		out = append(out, &ClaimedTask{Task: t, Events: events, State: state})
	}
	return out, nil
}

// LeaseRef names a lease a worker believes it holds.
type LeaseRef struct {
	TaskID uuid.UUID
	Epoch  int64
}

// LeaseExtendMany extends the given leases to ttl from now by the database
// clock and returns the ids whose lease was extended; the others are lost
// (the task moved to another epoch or finished).
func (s *Store) LeaseExtendMany(ctx context.Context, leases []LeaseRef, ttl time.Duration) (map[uuid.UUID]bool, error) {
	ids := make([]uuid.UUID, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.TaskID, l.Epoch
	}
	rows, err := s.pool.Query(ctx, s.sql("LeaseExtendMany"), pgx.NamedArgs{
		"ids": ids, "epochs": epochs, "lease_seconds": ttl.Seconds(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	held := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		held[id] = true
	}
	return held, nil
}
