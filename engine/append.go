package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EventAppendParams describes an append to one task's log.
type EventAppendParams struct {
	TaskID uuid.UUID
	// State is the task's state as the caller knows it: the replay of its
	// log up to State.LastSeq. The append succeeds only if the log is still
	// there.
	State history.State
	// Epoch, when not 0, fences the append: it succeeds only while the task
	// is under this lease epoch. Appends made for an attempt set it.
	Epoch int64
	// ExpiredOnly restricts the append to a task whose lease has expired by
	// the database clock (the rescuer's append).
	ExpiredOnly bool
	// At is the time of the new events. Default [Now].
	At time.Time
	// Attempt is the attempt the new events belong to.
	Attempt int
	// Payloads are the new events' bodies, in order.
	Payloads []history.Payload
}

// EventAppend appends events to a task's log and updates its projection row
// to their replay, in one statement. It returns the new state.
//
// Errors: [ErrNotFound] if the task does not exist; [ErrFenced] if Epoch is
// set and the task has moved to another epoch; [ErrConflict] if the log grew
// past State.LastSeq; an error marked history.ErrInvalidHistory if the events
// cannot follow State (nothing is written).
func (s *Store) EventAppend(ctx context.Context, p *EventAppendParams) (history.State, error) {
	return s.eventAppend(ctx, s.pool, p)
}

func (s *Store) eventAppend(ctx context.Context, q Querier, p *EventAppendParams) (history.State, error) {
	args, next, err := s.appendArgs(p)
	if err != nil {
		return p.State, err
	}
	tag, err := q.Exec(ctx, s.sql("EventAppend"), args)
	if err != nil {
		return p.State, errors.Wrapf(interpretError(err), "append events to task %s", p.TaskID)
	}
	if tag.RowsAffected() == 0 {
		return p.State, s.explainRefusal(ctx, q, p)
	}
	return next, nil
}

// appendArgs replays the new events onto p.State and returns the statement's
// arguments: the projection columns come from the replayed state, so the row
// equals the replay by construction.
func (s *Store) appendArgs(p *EventAppendParams) (pgx.NamedArgs, history.State, error) {
	at := p.At
	if at.IsZero() {
		at = Now()
	}
	at = normalizeTime(at)
	n := len(p.Payloads)
	if n == 0 {
		return nil, p.State, errors.AssertionFailedf("append to task %s: no events", p.TaskID)
	}
	var (
		seqs     = make([]int64, n)
		types    = make([]string, n)
		ats      = make([]time.Time, n)
		attempts = make([]int32, n)
		datas    = make([]string, n)
	)
	next := p.State
	for i, payload := range p.Payloads {
		payload = normalizePayload(payload)
		ev := history.Event{Seq: p.State.LastSeq + int64(i) + 1, At: at, Attempt: p.Attempt, Data: payload}
		var err error
		if next, err = history.Apply(next, ev); err != nil {
			return nil, p.State, errors.Wrapf(err, "append to task %s", p.TaskID)
		}
		data, err := history.Encode(payload)
		if err != nil {
			return nil, p.State, err
		}
		seqs[i], types[i], ats[i], attempts[i], datas[i] = ev.Seq, string(ev.Type()), at, int32(p.Attempt), string(data)
	}
	var lastError []byte
	if next.LastError != nil {
		var err error
		if lastError, err = json.Marshal(next.LastError); err != nil {
			return nil, p.State, errors.Wrap(err, "encode last error")
		}
	}
	args := pgx.NamedArgs{
		"id": p.TaskID, "expected_seq": p.State.LastSeq, "epoch": p.Epoch, "expired_only": p.ExpiredOnly,
		"status": string(next.Status), "run_at": next.RunAt, "attempt": next.Attempt,
		"lease_owner": nullString(next.Lease.Owner), "lease_epoch": next.Lease.Epoch,
		"output": nullJSON(next.Output), "last_error": lastError,
		"cancel_requested": next.CancelRequested, "last_seq": next.LastSeq,
		"updated_at": next.UpdatedAt, "started_at": nullTime(next.StartedAt), "finished_at": nullTime(next.FinishedAt),
		"seqs": seqs, "types": types, "ats": ats, "attempts": attempts, "datas": datas,
	}
	return args, next, nil
}

// explainRefusal finds out why an append wrote nothing.
func (s *Store) explainRefusal(ctx context.Context, q Querier, p *EventAppendParams) error {
	var lastSeq, epoch int64
	err := q.QueryRow(ctx, s.sql("TaskFenceByID"), pgx.NamedArgs{"id": p.TaskID}).Scan(&lastSeq, &epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errors.Mark(errors.Newf("append to task %s: no such task", p.TaskID), ErrNotFound)
	case err != nil:
		return errors.Wrapf(err, "append to task %s", p.TaskID)
	case p.Epoch != 0 && epoch != p.Epoch:
		return errors.Mark(errors.Newf("append to task %s: lease epoch %d, task is at %d", p.TaskID, p.Epoch, epoch), ErrFenced)
	case lastSeq != p.State.LastSeq:
		return errors.Mark(errors.Newf("append to task %s: expected seq %d, log is at %d", p.TaskID, p.State.LastSeq, lastSeq), ErrConflict)
	default:
		// Same seq and epoch: only ExpiredOnly can have refused it.
		return errors.Mark(errors.Newf("append to task %s: lease has not expired", p.TaskID), ErrConflict)
	}
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// normalizePayload rounds the times in a payload to what PostgreSQL stores
// (UTC microseconds), so the projection written from it equals its replay
// from the database.
func normalizePayload(p history.Payload) history.Payload {
	switch v := p.(type) {
	case history.Scheduled:
		v.RunAt = normalizeTime(v.RunAt)
		return v
	case history.AttemptStartedData:
		v.LeaseExpiresAt = normalizeTime(v.LeaseExpiresAt)
		return v
	case history.AttemptFailedData:
		if v.NextRunAt != nil {
			t := normalizeTime(*v.NextRunAt)
			v.NextRunAt = &t
		}
		return v
	case history.LeaseExpiredData:
		v.NextRunAt = normalizeTime(v.NextRunAt)
		return v
	}
	return p
}
