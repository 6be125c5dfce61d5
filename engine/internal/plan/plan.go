// Package plan is what both store drivers do alike before they write:
// checking and encoding a start, replaying an append onto the caller's
// state (so the projection row is written from the replay), decoding
// stored events, rebuilding a fresh task's task_scheduled from its row, and
// the small rules of claims, schedules and scans they share, and what a
// transaction holds back until its commit ([AfterCommit]). It is
// internal to engine: the drivers import it, nothing else should.
//
// It imports engine/store, history, internal/jsoncheck and
// internal/inputid.
package plan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/inputid"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

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
	// FairAt is the claim's ordering hint for the task's row (fair_at,
	// not part of the history): its run time, except for a parent its
	// children woke, which is placed at its creation, ahead of its own
	// children and of all work younger than it (see [WokenParentFairAt]).
	FairAt time.Time
	// Bytes is the length of the new events' data, which the task's
	// history_bytes grows by; Signal is set when they include a signal,
	// the append [HistoryBound] bounds.
	Bytes  int64
	Signal bool
}

// Append replays p's events onto p.State and encodes them: what every
// store does before its fenced write. An append that cannot follow the
// state, or that would leave the task stuck, is refused here, before
// anything is written. The new events are at p.At, or now when it is zero.
func Append(p *store.EventAppendParams, now time.Time) (AppendPlan, error) {
	at := p.At
	if at.IsZero() {
		at = now
	}
	at = NormalizeTime(at)
	if len(p.Payloads) == 0 {
		return AppendPlan{}, errors.AssertionFailedf("append to task %s: no events", p.TaskID)
	}
	events := make([]history.Event, len(p.Payloads))
	for i, payload := range p.Payloads {
		events[i] = history.Event{Seq: p.State.LastSeq + int64(i) + 1, At: at, Attempt: p.Attempt, Data: notBefore(NormalizePayload(payload), at)}
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
	plan := AppendPlan{Next: next, Events: make([]EncodedEvent, len(events)), FairAt: WokenParentFairAt(p.State, next)}
	for i, ev := range events {
		data, err := history.Encode(ev.Data)
		if err != nil {
			return AppendPlan{}, err
		}
		plan.Events[i] = EncodedEvent{Seq: ev.Seq, Type: ev.Type(), At: at, Attempt: p.Attempt, Data: data}
		plan.Bytes += int64(len(data))
		plan.Signal = plan.Signal || ev.Type() == history.SignalReceived
	}
	if next.LastError != nil {
		if plan.LastError, err = json.Marshal(next.LastError); err != nil {
			return AppendPlan{}, errors.Wrap(err, "encode last error")
		}
	}
	return plan, nil
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

// NormalizePayload rounds the times in a payload to what PostgreSQL stores
// (UTC microseconds), so the projection written from it equals its replay
// from the database; applied to decoded payloads, it puts their times in
// UTC whatever offset the JSON carried.
func NormalizePayload(p history.Payload) history.Payload {
	switch v := p.(type) {
	case history.TaskScheduledData:
		v.RunAt = NormalizeTime(v.RunAt)
		if v.Deadline != nil {
			d := NormalizeTime(*v.Deadline)
			v.Deadline = &d
		}
		if v.StartDeadline != nil {
			d := NormalizeTime(*v.StartDeadline)
			v.StartDeadline = &d
		}
		return v
	case history.AttemptStartedData:
		v.LeaseExpiresAt = NormalizeTime(v.LeaseExpiresAt)
		return v
	case history.AttemptFailedData:
		if v.NextRunAt != nil {
			t := NormalizeTime(*v.NextRunAt)
			v.NextRunAt = &t
		}
		return v
	case history.LeaseExpiredData:
		v.NextRunAt = NormalizeTime(v.NextRunAt)
		return v
	case history.WaitStartedData:
		v.Deadline = NormalizeTime(v.Deadline)
		return v
	}
	return p
}

// EventScanBounds checks p and returns its page size and the lower bound
// of its time range with the cursor's time folded in: what every store's
// scan starts from.
func EventScanBounds(p *store.EventScanParams) (limit int, since time.Time, err error) {
	limit = p.Limit
	switch {
	case p.Namespace == "":
		return 0, time.Time{}, errors.New("scan events: namespace is empty")
	case p.Until.IsZero():
		return 0, time.Time{}, errors.New("scan events: Until is required (the end of the time range, exclusive)")
	case limit < 0 || limit > store.MaxEventScanLimit:
		return 0, time.Time{}, errors.Newf("scan events: limit %d: use 1 to %d (0 for %d)", limit, store.MaxEventScanLimit, store.DefaultEventScanLimit)
	case limit == 0:
		limit = store.DefaultEventScanLimit
	}
	// The cursor's time is a lower bound too, given to the index as one:
	// the row comparison itself is no index condition.
	since = p.Since
	if p.After != nil && p.After.At.After(since) {
		since = p.After.At
	}
	return limit, since, nil
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

// ScheduledFromRow rebuilds a task's task_scheduled payload from its row,
// which the projection invariant makes equal to it, but for ContinuedFrom
// and ForkedFrom, which the row does not keep (informational: nothing the
// runtime decides reads them).
func ScheduledFromRow(t *store.Task) history.TaskScheduledData {
	return history.TaskScheduledData{
		Namespace: t.Namespace, TaskType: t.Type, TypeVersion: t.TypeVersion, Queue: t.Queue,
		Priority: t.Priority, Input: t.Input, RunAt: t.RunAt, IdempotencyKey: t.IdempotencyKey,
		TraceID: t.TraceID, Labels: t.Labels, MaxAttempts: t.MaxAttempts, Deadline: t.Deadline, StartDeadline: t.StartDeadline,
		FairnessKey: t.FairnessKey, FairnessWeight: t.FairnessWeight,
		ParentID: ParentString(t.ParentID), ParentPosition: t.ParentPosition,
	}
}

// ParentString is a parent id as task_scheduled writes it: empty for none.
func ParentString(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

// The retry-after hint of a full queue is how long its workers should take
// to start enough of its waiting tasks to make room, estimated from what
// runs now (Little's law): L tasks running whose attempts are on average A
// old take about 2A each, so the queue starts L/2A tasks a second. With
// nothing running, no worker is serving the queue and room is not near.
const (
	minQueueFullRetryAfter  = 100 * time.Millisecond
	maxQueueFullRetryAfter  = 5 * time.Minute
	idleQueueFullRetryAfter = 30 * time.Second
)

// QueueFullRetryAfter estimates how long until need waiting tasks of a
// queue have started, given running tasks of mean age meanAge.
func QueueFullRetryAfter(need, running int, meanAge time.Duration) time.Duration {
	if running == 0 {
		return idleQueueFullRetryAfter
	}
	d := time.Duration(float64(need) * 2 * float64(meanAge) / float64(running))
	return min(max(d, minQueueFullRetryAfter), maxQueueFullRetryAfter)
}

// StartPlan is a task start worked out before anything is written.
type StartPlan struct {
	ID        uuid.UUID                 // the start's ID, or a new UUIDv7
	Scheduled history.TaskScheduledData // the task_scheduled payload: namespace set, times normalized, run time defaulted to now
	Data      []byte                    // Scheduled, encoded
	Labels    []byte                    // Scheduled.Labels as JSON; nil when none
	// RefuseKeyReuse is the start's [store.TaskStartParams.RefuseKeyReuse].
	RefuseKeyReuse bool
	// DataKey is the start's [store.TaskStartParams.DataKey].
	DataKey []byte
	// Blobs are the start's [store.TaskStartParams.Blobs].
	Blobs []*store.Blob
}

// SameStart reports whether a start (its type and input) is the one that
// made an existing task of type existingType and input existingInput, as
// [store.TaskStartParams.RefuseKeyReuse] compares them: the same type, and
// inputs of the same canonical form. Both drivers read existingInput back
// differently (jsonb normalizes it, SQLite keeps the text), which the
// canonical form does not see.
func SameStart(existingType string, existingInput []byte, sched history.TaskScheduledData) bool {
	if existingType != sched.TaskType {
		return false
	}
	a, aSealed := history.ParseSealed(existingInput)
	b, bSealed := history.ParseSealed(sched.Input)
	if aSealed || bSealed {
		// Encrypted inputs: each start seals with a fresh nonce (and its
		// own task's key), so compare the keyed digests of the plaintexts.
		return aSealed && bSealed && len(a.Digest) > 0 && bytes.Equal(a.Digest, b.Digest)
	}
	if history.MaybeBlobEnvelope(existingInput) || history.MaybeBlobEnvelope(sched.Input) {
		// Kept by reference: each start names a new blob; compare the
		// canonical digests of what they hold.
		return bytes.Equal(inputid.Digest(existingInput), inputid.Digest(sched.Input))
	}
	return jsoncheck.Equal(existingInput, sched.Input)
}

// KeyReused is the error of a start [SameStart] refused: it names neither
// the existing task nor its state.
func KeyReused() error {
	return errmark.Mark(errors.New("the idempotency key is taken by a task of another type or input"), store.ErrIdempotencyKeyReused)
}

// Start checks and encodes a start at now: what every store does
// before it writes a task. A payload that could never be replayed is
// refused here, before anything is written.
func Start(p *store.TaskStartParams, now time.Time) (StartPlan, error) {
	sched := p.Scheduled
	sched.Namespace = p.Namespace
	if sched.Namespace == "" {
		return StartPlan{}, errors.New("namespace is empty")
	}
	if sched.RunAt.IsZero() {
		sched.RunAt = now
	}
	sched.RunAt = NormalizeTime(sched.RunAt)
	if sched.Deadline != nil {
		d := NormalizeTime(*sched.Deadline)
		sched.Deadline = &d
	}
	if sched.StartDeadline != nil {
		d := NormalizeTime(*sched.StartDeadline)
		sched.StartDeadline = &d
	}
	if _, err := history.Apply(history.State{}, history.Event{Seq: 1, At: now, Data: sched}); err != nil {
		return StartPlan{}, err
	}
	data, err := history.Encode(sched)
	if err != nil {
		return StartPlan{}, err
	}
	id := p.ID
	if id == uuid.Nil {
		if id, err = uuid.NewV7(); err != nil {
			return StartPlan{}, errors.Wrap(err, "new task id")
		}
	}
	for _, b := range p.Blobs {
		if p.ID == uuid.Nil || b.TaskID != p.ID || b.Namespace != p.Namespace {
			return StartPlan{}, errors.New("a start's blobs need its ID, and belong to it and its namespace")
		}
	}
	out := StartPlan{ID: id, Scheduled: sched, Data: data, RefuseKeyReuse: p.RefuseKeyReuse, DataKey: p.DataKey, Blobs: p.Blobs}
	if len(sched.Labels) > 0 {
		if out.Labels, err = json.Marshal(sched.Labels); err != nil {
			return StartPlan{}, errors.Wrap(err, "encode labels")
		}
	}
	return out, nil
}

// DecodeEvent decodes a stored event: its payload from the versioned JSON,
// its times in UTC at the stored precision. What every store does with the
// rows of its event log.
func DecodeEvent(seq int64, typ history.Type, at time.Time, attempt int, data []byte) (history.Event, error) {
	payload, err := history.Decode(typ, data)
	if err != nil {
		return history.Event{}, errors.Wrapf(err, "event %d", seq)
	}
	return history.Event{Seq: seq, At: NormalizeTime(at), Attempt: attempt, Data: NormalizePayload(payload)}, nil
}

// Now reads c (the wall clock when nil) for event times: UTC, truncated to
// the microsecond PostgreSQL stores, so a time read back equals the one
// written.
func Now(c store.Clock) time.Time {
	if c == nil {
		c = store.WallClock
	}
	return NormalizeTime(c.Now())
}

func NormalizeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// WokenParentFairAt is the fair_at of a task moving from prev to next: its
// run time, but its creation time when the move ends its wait for its
// children. A fan-in must not queue behind the fan-out's own backlog: the
// children, created after their parent, would otherwise all go first,
// and a woken parent would wait for the whole queue.
func WokenParentFairAt(prev, next history.State) time.Time {
	if prev.ChildWait != nil && next.ChildWait == nil && next.Status == history.StatusPending && next.CreatedAt.Before(next.RunAt) {
		return next.CreatedAt
	}
	return next.RunAt
}
