package sdk

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// What the client reads comes from the store as the payload stage wrote
// it (sealed, kept by reference); these decode it on its way to the
// caller: every read that hands out a payload goes through one of them.

// openTasks opens the payloads of tasks (a listing's), in place:
// references are left as they are stored.
func (c *Client) openTasks(ctx context.Context, tasks []*store.Task) error {
	ps := make([]*payload.Payload, 0, 2*len(tasks))
	for _, t := range tasks {
		ps = append(ps,
			&payload.Payload{Namespace: t.Namespace, Task: t.ID, Kind: payload.Input, Data: t.Input, KeepRefs: true},
			&payload.Payload{Namespace: t.Namespace, Task: t.ID, Kind: payload.Output, Data: t.Output, KeepRefs: true})
	}
	if err := c.store.Decode(ctx, ps); err != nil {
		return err
	}
	for i, t := range tasks {
		t.Input, t.Output = ps[2*i].Data, ps[2*i+1].Data
	}
	return nil
}

// decodeEvents returns events of task id, of the client's namespace, with
// their payloads decoded (a copy, when any is): opened, and with keepRefs
// false read back when they are kept by reference, each event then
// reading as if its payload were kept in place. A reference whose blob is
// gone, shredded or another task's stays as it is; one that is damaged is
// an error marked [ErrBlobCorrupt]. archived, for events read from an
// archive, is what the archive kept beside them.
func (c *Client) decodeEvents(ctx context.Context, id uuid.UUID, events []history.Event, archived *payload.Archived, keepRefs bool) ([]history.Event, error) {
	return decodeEventsIn(ctx, c.store, c.namespace, id, events, archived, keepRefs)
}

// decodeEventsIn is [Client.decodeEvents] through st, of a task of
// namespace ns: what a worker reads a history with.
func decodeEventsIn(ctx context.Context, st *edge.Store, ns string, id uuid.UUID, events []history.Event, archived *payload.Archived, keepRefs bool) ([]history.Event, error) {
	var ps []*payload.Payload
	var at []int
	for i, e := range events {
		if p := payload.OfEvent(ns, id, e.Data); p != nil && (len(p.Data) > 0 || p.Ref != nil) {
			p.KeepRefs, p.Archived = keepRefs, archived
			ps, at = append(ps, p), append(at, i)
		}
	}
	if len(ps) == 0 {
		return events, nil
	}
	if err := st.Decode(ctx, ps); err != nil {
		return nil, err
	}
	out := slices.Clone(events)
	for j, i := range at {
		p := ps[j]
		if err := unresolved(p.Err); err != nil {
			if step, ok := events[i].Data.(history.StepCompletedData); ok {
				return nil, errors.Wrapf(err, "the output of step %d (%s)", step.Position, step.Name)
			}
			return nil, errors.Wrapf(err, "the output in event %d", events[i].Seq)
		}
		out[i].Data = p.Into(events[i].Data)
	}
	return out, nil
}

// openHistories opens the payloads of the histories of several tasks of
// the client's namespace, in one batch, in place: references are left as
// they are stored.
func (c *Client) openHistories(ctx context.Context, histories map[uuid.UUID][]history.Event) error {
	type at struct {
		id uuid.UUID
		i  int
	}
	var ps []*payload.Payload
	var where []at
	for id, events := range histories {
		for i, e := range events {
			if p := payload.OfEvent(c.namespace, id, e.Data); p != nil && (len(p.Data) > 0 || p.Ref != nil) {
				p.KeepRefs = true
				ps, where = append(ps, p), append(where, at{id, i})
			}
		}
	}
	if len(ps) == 0 {
		return nil
	}
	if err := c.store.Decode(ctx, ps); err != nil {
		return err
	}
	for j, w := range where {
		e := &histories[w.id][w.i]
		e.Data = ps[j].Into(e.Data)
	}
	return nil
}

// openAudit opens the payloads of an audit's page, in place: each event's
// data and its JSON.
func (c *Client) openAudit(ctx context.Context, page []store.AuditEvent) error {
	var ps []*payload.Payload
	var at []int
	for i := range page {
		e := &page[i]
		if p := payload.OfEvent(e.Namespace, e.TaskID, e.Event.Data); p != nil && len(p.Data) > 0 {
			p.KeepRefs = true
			ps, at = append(ps, p), append(at, i)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	stored := make([][]byte, len(ps))
	for j, p := range ps {
		stored[j] = p.Data
	}
	if err := c.store.Decode(ctx, ps); err != nil {
		return err
	}
	for j, i := range at {
		e := &page[i]
		if slices.Equal(ps[j].Data, stored[j]) {
			continue
		}
		opened := e.Event
		opened.Data = ps[j].Into(e.Event.Data)
		if data, err := history.Encode(opened.Data); err == nil {
			e.Event, e.Data = opened, data
		}
	}
	return nil
}

// openSchedules opens the inputs of schedules, in place.
func (c *Client) openSchedules(ctx context.Context, schedules []store.Schedule) error {
	ps := make([]*payload.Payload, len(schedules))
	for i, sc := range schedules {
		ps[i] = &payload.Payload{Namespace: sc.Namespace, Kind: payload.ScheduleInput, Data: sc.Input, KeepRefs: true}
	}
	if err := c.store.Decode(ctx, ps); err != nil {
		return err
	}
	for i := range schedules {
		schedules[i].Input = ps[i].Data
	}
	return nil
}
