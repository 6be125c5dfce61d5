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

// Page sizes of [Store.EventScan].
const (
	DefaultEventScanLimit = 1000
	MaxEventScanLimit     = 10_000
)

// EventScanParams selects one page of [Store.EventScan]. Empty filters
// match everything.
type EventScanParams struct {
	// Namespace is the namespace of the events' tasks. Required.
	Namespace string
	// Since and Until bound the events' times: Since <= at < Until. A zero
	// Since means from the first event; Until is required.
	Since, Until time.Time
	// After, when set, is the cursor: the page starts after this event.
	After *EventCursor
	// EventTypes keeps events of these types only.
	EventTypes []history.Type
	// TaskType and Queue keep events of tasks of this type, of this queue.
	TaskType string
	Queue    string
	// Limit is the page size: default [DefaultEventScanLimit], at most
	// [MaxEventScanLimit].
	Limit int
}

// EventCursor is a position in the order of [Store.EventScan]: (at, task
// id, seq), which is unique.
type EventCursor struct {
	At     time.Time
	TaskID uuid.UUID
	Seq    int64
}

// AuditEvent is one event as [Store.EventScan] returns it, with the row of
// its task as it is now (not as it was when the event was written).
type AuditEvent struct {
	TaskID uuid.UUID
	Event  history.Event
	// Data is the stored payload, for callers that pass it on as JSON
	// without encoding it again.
	Data json.RawMessage

	Namespace   string
	TaskType    string
	TypeVersion int
	Queue       string
	Status      history.Status
	TraceID     string
	Labels      map[string]string
	FairnessKey string
}

// Cursor returns the position of e, for the next page's After.
func (e *AuditEvent) Cursor() EventCursor {
	return EventCursor{At: e.Event.At, TaskID: e.TaskID, Seq: e.Event.Seq}
}

// EventScan returns one page of the events of p.Namespace in [p.Since,
// p.Until), ordered by (at, task id, seq), after p.After, filtered by event
// type, task type and queue: one statement per page. A page shorter than
// the limit means nothing more matches in the range.
//
// The time range is served by a BRIN index, which narrows the read to the
// block ranges of the time range but gives no order: the statement reads
// and sorts every event of [max(Since, After.At), Until) that passes the
// filters, however small the page. To page through a wide range cheaply,
// narrow Until to a window holding a few pages (sdk.Client.Audit does).
func (s *PGStore) EventScan(ctx context.Context, p *EventScanParams) ([]AuditEvent, error) {
	args, limit, err := eventScanArgs(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql("EventScan"), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "scan events")
	}
	page, err := pgx.AppendRows(make([]AuditEvent, 0, limit), rows, scanAuditEvent)
	return page, errors.Wrap(interpretError(err), "scan events")
}

// EventScanBounds checks p and returns its page size and the lower bound
// of its time range with the cursor's time folded in: what every store's
// scan starts from.
func EventScanBounds(p *EventScanParams) (limit int, since time.Time, err error) {
	limit = p.Limit
	switch {
	case p.Namespace == "":
		return 0, time.Time{}, errors.New("scan events: namespace is empty")
	case p.Until.IsZero():
		return 0, time.Time{}, errors.New("scan events: Until is required (the end of the time range, exclusive)")
	case limit < 0 || limit > MaxEventScanLimit:
		return 0, time.Time{}, errors.Newf("scan events: limit %d: use 1 to %d (0 for %d)", limit, MaxEventScanLimit, DefaultEventScanLimit)
	case limit == 0:
		limit = DefaultEventScanLimit
	}
	// The cursor's time is a lower bound too, given to the index as one:
	// the row comparison itself is no index condition.
	since = p.Since
	if p.After != nil && p.After.At.After(since) {
		since = p.After.At
	}
	return limit, since, nil
}

// eventScanArgs checks p and turns it into the statement's arguments and
// the page size.
func eventScanArgs(p *EventScanParams) (pgx.NamedArgs, int, error) {
	limit, since, err := EventScanBounds(p)
	if err != nil {
		return nil, 0, err
	}
	var after EventCursor
	if p.After != nil {
		after = *p.After
	}
	types := make([]string, len(p.EventTypes))
	for i, t := range p.EventTypes {
		types[i] = string(t)
	}
	return pgx.NamedArgs{
		"namespace": p.Namespace, "since": since, "until": p.Until,
		"paged": p.After != nil, "after_at": after.At, "after_task_id": after.TaskID, "after_seq": after.Seq,
		"event_types": types, "task_type": p.TaskType, "queue": p.Queue, "max": limit,
	}, limit, nil
}

func scanAuditEvent(row pgx.CollectableRow) (AuditEvent, error) {
	var (
		e                    AuditEvent
		typ, status          string
		traceID, fairnessKey *string
		data, labels         []byte // into json.RawMessage, pgx would check the JSON again
	)
	err := row.Scan(&e.TaskID, &e.Event.Seq, &typ, &e.Event.At, &e.Event.Attempt, &data,
		&e.Namespace, &e.TaskType, &e.TypeVersion, &e.Queue, &status, &traceID, &labels, &fairnessKey)
	if err != nil {
		return AuditEvent{}, err
	}
	e.Event.At, e.Data = e.Event.At.UTC(), data
	payload, err := history.Decode(history.Type(typ), data)
	if err != nil {
		return AuditEvent{}, errors.Wrapf(err, "task %s event %d", e.TaskID, e.Event.Seq)
	}
	e.Event.Data = normalizePayload(payload)
	e.Status, e.TraceID, e.FairnessKey = history.Status(status), deref(traceID), deref(fairnessKey)
	if labels != nil {
		if err := json.Unmarshal(labels, &e.Labels); err != nil {
			return AuditEvent{}, errors.Wrapf(err, "decode labels of task %s", e.TaskID)
		}
	}
	return e, nil
}
