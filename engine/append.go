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

	// attemptStartedAt is when the attempt these events belong to began,
	// where the writer knows it (the processor, the rescuer): an append
	// that ends the attempt observes its duration.
	attemptStartedAt time.Time
}

// EventAppend appends events to a task's log and updates its projection row
// to their replay, in one statement. It returns the new state.
//
// Errors: [ErrNotFound] if the task does not exist; [ErrFenced] if Epoch is
// set and the task has moved to another epoch; [ErrConflict] if the log grew
// past State.LastSeq; an error marked history.ErrInvalidHistory if the events
// cannot follow State (nothing is written).
func (s *PGStore) EventAppend(ctx context.Context, p *EventAppendParams) (history.State, error) {
	res, err := s.EventAppendMany(ctx, []*EventAppendParams{p})
	if err != nil {
		return p.State, err
	}
	return res[0].State, res[0].Err
}

// AppendResult is the outcome of one append of an [Store.EventAppendMany].
type AppendResult struct {
	State history.State // the new state; the old one when Err is set
	Err   error         // as for [Store.EventAppend]
}

// EventAppendMany appends to many tasks' logs in one statement: the group
// commit behind worker outcomes. Each append succeeds or is refused on its
// own (see [Store.EventAppend]); the returned error is for the statement as
// a whole, and then nothing was written. ps must not name a task twice.
func (s *PGStore) EventAppendMany(ctx context.Context, ps []*EventAppendParams) ([]AppendResult, error) {
	batch := newAppendBatch(len(ps))
	out := make([]AppendResult, len(ps))
	valid := 0
	for i, p := range ps {
		out[i].State = p.State
		next, err := batch.add(p)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].State = next
		valid++
	}
	if valid == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, s.sql("EventAppendMany"), batch.args(s.doneChannel, s.channel, s.cancelChannel))
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "append events")
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "append events")
	}
	ok := make(map[[16]byte]bool, len(written))
	for _, id := range written {
		ok[id] = true
	}
	for i, p := range ps {
		if out[i].Err == nil && ok[p.TaskID] {
			// Committed: the rows are all read, so the statement is over.
			s.metrics.observeAppended(p, out[i].State)
		}
		if out[i].Err != nil || ok[p.TaskID] {
			continue
		}
		out[i].State = p.State
		out[i].Err = s.explainRefusal(ctx, s.pool, p)
	}
	return out, nil
}

// appendBatch gathers the columns of an EventAppendMany statement.
type appendBatch struct {
	ids, evTaskIDs                                      [][16]byte // uuid.UUID would go through its driver.Valuer, as text
	expectedSeqs, epochs, leaseEpochs, lastSeqs, evSeqs []int64
	expiredOnly, cancelRequesteds                       []bool
	statuses, evTypes, evDatas                          []string
	runAts, updatedAts, evAts                           []time.Time
	startedAts, finishedAts                             []*time.Time
	attempts, evAttempts                                []int32
	leaseOwners, outputs, lastErrors                    []*string
}

func newAppendBatch(n int) *appendBatch {
	return &appendBatch{
		ids: make([][16]byte, 0, n), expectedSeqs: make([]int64, 0, n), epochs: make([]int64, 0, n),
		expiredOnly: make([]bool, 0, n), statuses: make([]string, 0, n), runAts: make([]time.Time, 0, n),
		attempts: make([]int32, 0, n), leaseOwners: make([]*string, 0, n), leaseEpochs: make([]int64, 0, n),
		outputs: make([]*string, 0, n), lastErrors: make([]*string, 0, n), cancelRequesteds: make([]bool, 0, n),
		lastSeqs: make([]int64, 0, n), updatedAts: make([]time.Time, 0, n), startedAts: make([]*time.Time, 0, n),
		finishedAts: make([]*time.Time, 0, n),
	}
}

// EncodedEvent is an event ready to be written: its columns in the events
// table.
type EncodedEvent struct {
	Seq     int64
	Type    history.Type
	At      time.Time
	Attempt int
	Data    []byte // history.Encode of the payload
}

// AppendPlan is an append worked out before anything is written: the
// events, encoded, and the state they replay to, from which the projection
// row is written (so the row equals the replay by construction).
type AppendPlan struct {
	Next      history.State
	Events    []EncodedEvent
	LastError []byte // Next.LastError as JSON; nil when none
}

// PlanAppend replays p's events onto p.State and encodes them: what every
// store does before its fenced write. An append that cannot follow the
// state, or that would leave the task stuck, is refused here, before
// anything is written.
func PlanAppend(p *EventAppendParams) (AppendPlan, error) {
	at := p.At
	if at.IsZero() {
		at = Now()
	}
	at = normalizeTime(at)
	if len(p.Payloads) == 0 {
		return AppendPlan{}, errors.AssertionFailedf("append to task %s: no events", p.TaskID)
	}
	events := make([]history.Event, len(p.Payloads))
	for i, payload := range p.Payloads {
		events[i] = history.Event{Seq: p.State.LastSeq + int64(i) + 1, At: at, Attempt: p.Attempt, Data: notBefore(normalizePayload(payload), at)}
	}
	// Replay first: what cannot follow the state is refused before
	// anything is encoded.
	next, err := history.ApplyAll(p.State, events)
	if err != nil {
		return AppendPlan{}, errors.Wrapf(err, "append to task %s", p.TaskID)
	}
	if _, ok := p.Payloads[len(p.Payloads)-1].(history.CompensationFailedData); ok {
		return AppendPlan{}, errors.AssertionFailedf("append to task %s: compensation_failed without the terminal event that must follow it", p.TaskID)
	}
	if next.Status == history.StatusRunning && next.Lease.Owner == "" {
		// attempt_failed without a next run time must be followed by a
		// terminal event in the same append; alone it would leave the task
		// running with no lease, where nothing would ever pick it up.
		return AppendPlan{}, errors.AssertionFailedf("append to task %s: attempt ended without a retry or a terminal event", p.TaskID)
	}
	plan := AppendPlan{Next: next, Events: make([]EncodedEvent, len(events))}
	for i, ev := range events {
		data, err := history.Encode(ev.Data)
		if err != nil {
			return AppendPlan{}, err
		}
		plan.Events[i] = EncodedEvent{Seq: ev.Seq, Type: ev.Type(), At: at, Attempt: p.Attempt, Data: data}
	}
	if next.LastError != nil {
		if plan.LastError, err = json.Marshal(next.LastError); err != nil {
			return AppendPlan{}, errors.Wrap(err, "encode last error")
		}
	}
	return plan, nil
}

// add plans p (see [PlanAppend]) and adds its projection row and events to
// the batch.
func (b *appendBatch) add(p *EventAppendParams) (history.State, error) {
	plan, err := PlanAppend(p)
	if err != nil {
		return p.State, err
	}
	for _, ev := range plan.Events {
		b.evTaskIDs = append(b.evTaskIDs, p.TaskID)
		b.evSeqs = append(b.evSeqs, ev.Seq)
		b.evTypes = append(b.evTypes, string(ev.Type))
		b.evAts = append(b.evAts, ev.At)
		b.evAttempts = append(b.evAttempts, int32(ev.Attempt))
		b.evDatas = append(b.evDatas, string(ev.Data))
	}
	next := plan.Next
	var lastError *string
	if plan.LastError != nil {
		lastError = ptr(string(plan.LastError))
	}
	b.ids = append(b.ids, p.TaskID)
	b.expectedSeqs = append(b.expectedSeqs, p.State.LastSeq)
	b.epochs = append(b.epochs, p.Epoch)
	b.expiredOnly = append(b.expiredOnly, p.ExpiredOnly)
	b.statuses = append(b.statuses, string(next.Status))
	b.runAts = append(b.runAts, next.RunAt)
	b.attempts = append(b.attempts, int32(next.Attempt))
	b.leaseOwners = append(b.leaseOwners, nullString(next.Lease.Owner))
	b.leaseEpochs = append(b.leaseEpochs, next.Lease.Epoch)
	b.outputs = append(b.outputs, nullJSONString(next.Output))
	b.lastErrors = append(b.lastErrors, lastError)
	b.cancelRequesteds = append(b.cancelRequesteds, next.CancelRequested)
	b.lastSeqs = append(b.lastSeqs, next.LastSeq)
	b.updatedAts = append(b.updatedAts, next.UpdatedAt)
	b.startedAts = append(b.startedAts, nullTime(next.StartedAt))
	b.finishedAts = append(b.finishedAts, nullTime(next.FinishedAt))
	return next, nil
}

func (b *appendBatch) args(doneChannel, readyChannel, cancelChannel string) pgx.NamedArgs {
	return pgx.NamedArgs{
		"ids": b.ids, "expected_seqs": b.expectedSeqs, "epochs": b.epochs, "expired_only": b.expiredOnly,
		"statuses": b.statuses, "run_ats": b.runAts, "attempts": b.attempts, "lease_owners": b.leaseOwners,
		"lease_epochs": b.leaseEpochs, "outputs": b.outputs, "last_errors": b.lastErrors,
		"cancel_requesteds": b.cancelRequesteds, "last_seqs": b.lastSeqs, "updated_ats": b.updatedAts,
		"started_ats": b.startedAts, "finished_ats": b.finishedAts,
		"ev_task_ids": b.evTaskIDs, "ev_seqs": b.evSeqs, "ev_types": b.evTypes, "ev_ats": b.evAts,
		"ev_attempts": b.evAttempts, "ev_datas": b.evDatas, "done_channel": doneChannel, "ready_channel": readyChannel,
		"cancel_channel": cancelChannel,
	}
}

// rebaseOntoCancel returns p moved onto the task's events after p.State
// (events is the task's whole log), if those are only a cancel request (the
// one append other writers make to a running task), and false otherwise.
func rebaseOntoCancel(p *EventAppendParams, events []history.Event) (*EventAppendParams, bool) {
	if int64(len(events)) < p.State.LastSeq {
		return nil, false
	}
	state := p.State
	for _, e := range events[p.State.LastSeq:] {
		if e.Type() != history.CancelRequested {
			return nil, false
		}
		var err error
		if state, err = history.Apply(state, e); err != nil {
			return nil, false
		}
	}
	rebased := *p
	rebased.State = state
	return &rebased, true
}

// explainRefusal finds out why an append wrote nothing.
func (s *PGStore) explainRefusal(ctx context.Context, q Querier, p *EventAppendParams) error {
	var lastSeq, epoch int64
	var leased bool
	err := q.QueryRow(ctx, s.sql("TaskFenceByID"), pgx.NamedArgs{"id": p.TaskID}).Scan(&lastSeq, &epoch, &leased)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errors.Mark(errors.Newf("append to task %s: no such task", p.TaskID), ErrNotFound)
	case err != nil:
		return errors.Wrapf(err, "append to task %s", p.TaskID)
	case p.Epoch != 0 && epoch != p.Epoch:
		return errors.Mark(errors.Newf("append to task %s: lease epoch %d, task is at %d", p.TaskID, p.Epoch, epoch), ErrFenced)
	case p.Epoch != 0 && !leased && !p.ExpiredOnly:
		// Same epoch, but its lease ended (expired and rescued, released):
		// the attempt is over even before anyone claims the task again.
		return errors.Mark(errors.Newf("append to task %s: lease epoch %d has ended", p.TaskID, p.Epoch), ErrFenced)
	case lastSeq != p.State.LastSeq:
		return errors.Mark(errors.Newf("append to task %s: expected seq %d, log is at %d", p.TaskID, p.State.LastSeq, lastSeq), ErrConflict)
	default:
		// Same seq and epoch: only ExpiredOnly can have refused it.
		return errors.Mark(errors.Newf("append to task %s: lease has not expired", p.TaskID), ErrConflict)
	}
}

func ptr[T any](v T) *T { return &v }

func nullJSONString(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	return ptr(string(b))
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// notBefore moves a retry scheduled before at, the time the failure is
// recorded (the worker decided a moment earlier), to at: a next run time
// never precedes the event that sets it.
func notBefore(p history.Payload, at time.Time) history.Payload {
	if v, ok := p.(history.AttemptFailedData); ok && v.NextRunAt != nil && v.NextRunAt.Before(at) {
		v.NextRunAt = &at
		return v
	}
	return p
}

// normalizePayload rounds the times in a payload to what PostgreSQL stores
// (UTC microseconds), so the projection written from it equals its replay
// from the database; applied to decoded payloads, it puts their times in
// UTC whatever offset the JSON carried.
func normalizePayload(p history.Payload) history.Payload {
	switch v := p.(type) {
	case history.Scheduled:
		v.RunAt = normalizeTime(v.RunAt)
		if v.Deadline != nil {
			d := normalizeTime(*v.Deadline)
			v.Deadline = &d
		}
		if v.StartDeadline != nil {
			d := normalizeTime(*v.StartDeadline)
			v.StartDeadline = &d
		}
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
