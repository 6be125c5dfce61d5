package plan

import (
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// eventTypes maps a stored type name to its history.Type, so reading an
// event's type from a row's bytes allocates nothing.
var eventTypes = func() map[string]history.Type {
	m := make(map[string]history.Type, len(history.Types))
	for _, t := range history.Types {
		m[string(t)] = t
	}
	return m
}()

// EventType returns the history.Type named by name, a row's bytes that
// need not outlive the call. An unknown name is returned as it is, for
// history.Decode to refuse.
func EventType(name []byte) history.Type {
	if t, ok := eventTypes[string(name)]; ok {
		return t
	}
	return history.Type(name)
}

// EventGroups gathers the events of a query that returns rows task by
// task (ordered by task, then seq) into a history per task. A task's
// events go into one slice as they come, and the map is touched once per
// task, not once per event: a long history is read without a map lookup
// per row.
type EventGroups struct {
	byTask map[uuid.UUID][]history.Event
	id     uuid.UUID
	events []history.Event
}

// Add appends ev to the history of task id.
func (g *EventGroups) Add(id uuid.UUID, ev history.Event) {
	if id != g.id {
		g.flush()
		g.id = id
	}
	g.events = append(g.events, ev)
}

func (g *EventGroups) flush() {
	if len(g.events) == 0 {
		return
	}
	if g.byTask == nil {
		g.byTask = map[uuid.UUID][]history.Event{}
	}
	// Rows out of task order still end up whole: a task met again is
	// appended to. A task met once keeps its slice as it is.
	if earlier, ok := g.byTask[g.id]; ok {
		g.byTask[g.id] = append(earlier, g.events...)
	} else {
		g.byTask[g.id] = g.events
	}
	g.events = nil
}

// ByTask returns the histories gathered, by task id (an empty map when
// there were none).
func (g *EventGroups) ByTask() map[uuid.UUID][]history.Event {
	g.flush()
	if g.byTask == nil {
		g.byTask = map[uuid.UUID][]history.Event{}
	}
	return g.byTask
}

// EventPageBounds checks p and returns its bounds with the defaults
// filled in: what every store's EventListPage starts from.
func EventPageBounds(p *store.EventPageParams) (limit int, maxBytes int64, err error) {
	limit, maxBytes = p.Limit, p.MaxBytes
	switch {
	case p.Namespace == "":
		return 0, 0, errors.New("list events: namespace is empty")
	case p.After < 0:
		return 0, 0, errors.Newf("list events: after seq %d: use 0 or more", p.After)
	case limit < 0 || limit > store.MaxEventPageLimit:
		return 0, 0, errors.Newf("list events: limit %d: use 1 to %d (0 for %d)", limit, store.MaxEventPageLimit, store.DefaultEventPageLimit)
	case maxBytes < 0:
		return 0, 0, errors.Newf("list events: max bytes %d: use 1 or more (0 for %d)", maxBytes, store.DefaultEventPageBytes)
	}
	if limit == 0 {
		limit = store.DefaultEventPageLimit
	}
	if maxBytes == 0 {
		maxBytes = store.DefaultEventPageBytes
	}
	return limit, maxBytes, nil
}

// PageFull says whether a page holding bytes of event data is full
// before an event of size more: a page holds at least one event.
func PageFull(events int, bytes, more, maxBytes int64) bool {
	return events > 0 && bytes+more > maxBytes
}
