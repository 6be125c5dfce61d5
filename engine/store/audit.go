package store

import (
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
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
