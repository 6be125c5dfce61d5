package sdk

import (
	"context"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// Reads of many tasks at once, for pages that show a few hundred tasks
// (the console's waiting list, a parent's children): one statement for
// all of them, not one per task. Each keeps to the client's namespace: a
// task of another namespace is left out as if it did not exist.

// Statuses returns the current status of each task of ids that exists in
// the client's namespace, by id; an id that names no task there is left
// out of the map. It reads the tasks' rows in one statement, and nothing
// of their histories or payloads.
func (c *Client) Statuses(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]history.Status, error) {
	tasks, err := c.store.TaskGetMany(ctx, &store.TaskGetManyParams{Namespace: c.namespace, IDs: ids})
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]history.Status, len(tasks))
	for _, t := range tasks {
		if t.Namespace == c.namespace {
			out[t.ID] = t.Status
		}
	}
	return out, nil
}

// RawHistories returns the histories of the tasks of ids that exist in
// the client's namespace, by id, each in order and as [Client.RawHistory]
// answers it (payloads kept by reference left as references); an id that
// names no task there has no entry. It reads the tasks' rows in one
// statement and their events in another, whole: it is meant for tasks
// whose histories are short, or few. Unlike [Client.RawHistory] it does
// not read the archive for a task retention removed.
func (c *Client) RawHistories(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error) {
	statuses, err := c.Statuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	mine := make([]uuid.UUID, 0, len(statuses))
	for _, id := range ids {
		if _, ok := statuses[id]; ok {
			mine = append(mine, id)
			delete(statuses, id) // an id given twice is read once
		}
	}
	if len(mine) == 0 {
		return map[uuid.UUID][]history.Event{}, nil
	}
	histories, err := c.store.EventList(ctx, store.EventListAll(c.namespace, mine...))
	if err != nil {
		return nil, err
	}
	return histories, c.openHistories(ctx, histories)
}
