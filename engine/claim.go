package engine

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
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
	// StrictPriority turns aging off: the claim takes the due tasks in
	// priority order only, and a flood of high-priority work can starve the
	// rest. By default one slot in eight goes to the longest-waiting task.
	StrictPriority bool
}

// ClaimedTask is a task a worker now holds under a lease, with its history.
type ClaimedTask struct {
	Task   *Task
	Events []history.Event
	State  history.State // Replay(Events); Status is running
	// Err is set, and Events and State are not, when the task's history
	// could not be decoded or replayed (for instance events written by a
	// newer cairn). One such task does not fail the others of the claim.
	Err error
}

// TaskClaimMany claims up to p.Max due tasks in one statement, one round
// trip: FOR UPDATE SKIP LOCKED, a new lease epoch, attempt_started appended,
// and each task returned with its history.
func (s *PGStore) TaskClaimMany(ctx context.Context, p *TaskClaimManyParams) ([]*ClaimedTask, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	types := make([]string, len(p.Types))
	versions := make([]int32, len(p.Types))
	for i, k := range p.Types {
		types[i], versions[i] = k.Type, int32(k.Version)
	}
	// A claim need not wait for its commit to reach disk: if the database
	// crashes and loses it, the task is simply pending again, and the
	// worker's own appends (which do wait) are refused as stale: the next
	// claim's epoch comes from the clock, so it never equals the lost
	// claim's (see the statement). One fsync
	// fewer on the way from a new task to its first step. Both statements
	// go in one pipeline, so they run as one implicit transaction and the
	// setting (is_local) ends with it.
	batch := &pgx.Batch{}
	batch.Queue("SELECT set_config('synchronous_commit', 'off', true)")
	// Concurrency-limited queues and rate-limited types: lock their rows
	// first (a separate statement, so the claim's snapshot is taken after
	// the lock and sees every claim committed before it).
	batch.Queue(s.sql("ClaimLocks"), pgx.NamedArgs{"namespace": p.Namespace, "queues": p.Queues, "types": types})
	var claimed []*ClaimedTask
	batch.Queue(s.sql("TaskClaimMany"), pgx.NamedArgs{
		"namespace": p.Namespace, "queues": p.Queues, "types": types, "versions": versions, "max": p.Max, "aging": AgingSlots(p.Max, p.StrictPriority),
		"owner": p.Owner, "lease_seconds": p.LeaseTTL.Seconds(),
	}).Query(func(rows pgx.Rows) error {
		var err error
		claimed, err = pgx.CollectRows(rows, scanClaimed)
		return err
	})
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errors.Wrap(interpretError(err), "claim tasks")
	}
	s.metrics.observeClaimed(claimed)
	return claimed, nil
}

// agingShare: one slot in this many of every claim goes to the
// longest-waiting due task, whatever its priority.
const agingShare = 8

// AgingSlots returns how many of a claim's max slots are reserved for the
// longest-waiting tasks: max/agingShare, plus one more with probability
// (max mod agingShare)/agingShare, so a worker that claims one task at a
// time still gives one claim in eight to the oldest.
func AgingSlots(max int, strict bool) int {
	if strict {
		return 0
	}
	n := max / agingShare
	if rand.IntN(agingShare) < max%agingShare {
		n++
	}
	return n
}

// scanClaimed reads a claimed task's row and earlier events, adds the
// attempt_started the claim appended (rebuilt from the row, as the
// statement's snapshot cannot see it), and replays them.
func scanClaimed(row pgx.CollectableRow) (*ClaimedTask, error) {
	var (
		seqs     []int64
		types    []string
		ats      []time.Time
		attempts []int32
		datas    []string
	)
	t, err := scanTaskWith(row, &seqs, &types, &ats, &attempts, &datas)
	if err != nil {
		return nil, err
	}
	if len(seqs) != len(types) || len(seqs) != len(ats) || len(seqs) != len(attempts) || len(seqs) != len(datas) {
		return nil, errors.AssertionFailedf("claimed task %s: event columns of different lengths", t.ID)
	}
	events := make([]history.Event, 0, len(seqs)+2)
	if len(seqs) == 0 && t.LastSeq == 2 {
		// A fresh task: its history before this claim is task_scheduled
		// alone, and the row holds everything in it.
		events = append(events, history.Event{Seq: 1, At: t.CreatedAt, Data: ScheduledFromRow(t)})
	}
	for i := range seqs {
		data, err := history.Decode(history.Type(types[i]), []byte(datas[i]))
		if err != nil {
			return &ClaimedTask{Task: t, Err: errors.Wrapf(err, "task %s event %d", t.ID, seqs[i])}, nil
		}
		events = append(events, history.Event{Seq: seqs[i], At: ats[i].UTC(), Attempt: int(attempts[i]), Data: normalizePayload(data)})
	}
	if t.LeaseExpiresAt == nil {
		return nil, errors.AssertionFailedf("claimed task %s has no lease expiry", t.ID)
	}
	events = append(events, history.Event{Seq: t.LastSeq, At: t.UpdatedAt, Attempt: t.Attempt, Data: history.AttemptStartedData{
		WorkerID: t.LeaseOwner, LeaseEpoch: t.LeaseEpoch, LeaseExpiresAt: *t.LeaseExpiresAt,
	}})
	state, err := history.Replay(events)
	if err != nil {
		return &ClaimedTask{Task: t, Err: errors.Wrapf(err, "replay claimed task %s", t.ID)}, nil
	}
	return &ClaimedTask{Task: t, Events: events, State: state}, nil
}

// LeaseRef names a lease a worker believes it holds.
type LeaseRef struct {
	TaskID uuid.UUID
	Epoch  int64
}

// LeaseRenewal is the reply of [Store.LeaseExtendMany] for one lease still
// held.
type LeaseRenewal struct {
	// CancelRequested says the task's cancel was requested: its attempt
	// should stop at its next checkpoint.
	CancelRequested bool
}

// LeaseExtendMany extends the given leases to ttl from now by the database
// clock and returns the leases it extended, by task id; the others are lost
// (the task moved to another epoch or finished).
func (s *PGStore) LeaseExtendMany(ctx context.Context, leases []LeaseRef, ttl time.Duration) (map[uuid.UUID]LeaseRenewal, error) {
	// Lock in id order, as appends do, so the two rarely deadlock.
	sorted := slices.Clone(leases)
	slices.SortFunc(sorted, func(a, b LeaseRef) int { return bytes.Compare(a.TaskID[:], b.TaskID[:]) })
	ids := make([][16]byte, len(sorted))
	epochs := make([]int64, len(sorted))
	for i, l := range sorted {
		ids[i], epochs[i] = l.TaskID, l.Epoch
	}
	rows, err := s.pool.Query(ctx, s.sql("LeaseExtendMany"), pgx.NamedArgs{
		"ids": ids, "epochs": epochs, "lease_seconds": ttl.Seconds(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	held := make(map[uuid.UUID]LeaseRenewal, len(leases))
	var id uuid.UUID
	var cancel bool
	_, err = pgx.ForEachRow(rows, []any{&id, &cancel}, func() error {
		held[id] = LeaseRenewal{CancelRequested: cancel}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	return held, nil
}

// ScheduledFromRow rebuilds a task's task_scheduled payload from its row,
// which the projection invariant makes equal to it.
func ScheduledFromRow(t *Task) history.Scheduled {
	return history.Scheduled{
		Namespace: t.Namespace, TaskType: t.Type, TypeVersion: t.TypeVersion, Queue: t.Queue,
		Priority: t.Priority, Input: t.Input, RunAt: t.RunAt, IdempotencyKey: t.IdempotencyKey,
		TraceID: t.TraceID, Labels: t.Labels, MaxAttempts: t.MaxAttempts, Deadline: t.Deadline, StartDeadline: t.StartDeadline,
		FairnessKey: t.FairnessKey, FairnessWeight: t.FairnessWeight,
	}
}
