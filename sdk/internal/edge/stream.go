package edge

import (
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/payload"
)

// WriteStream writes entries to the task's streams for this attempt,
// fenced by its lease epoch (engine.Attempt.StreamAppend), each chunk's
// data (JSON) encoded by the stage first: sealed in an encrypted
// namespace. It returns the seq of the last entry written. Any goroutine
// may call it (the executor's stream flusher does).
func (a *Attempt) WriteStream(ctx context.Context, entries []store.StreamWrite) (int64, error) {
	var batch []*payload.Payload
	var at []int
	for i, e := range entries {
		if e.Kind == store.StreamChunk {
			batch = append(batch, &payload.Payload{Namespace: a.Task.Namespace, Task: a.Task.ID, Kind: payload.StreamChunk, Data: e.Data})
			at = append(at, i)
		}
	}
	if len(batch) > 0 {
		enc, err := a.e.stage.Encode(ctx, batch)
		if err != nil {
			return 0, err
		}
		entries = slices.Clone(entries)
		for j, i := range at {
			entries[i].Data = enc.At(j).Data
		}
	}
	return a.a.StreamAppend(ctx, entries)
}

// StreamOpenList is engine.Attempt.StreamOpenList: what earlier attempts
// left open in the task's streams.
func (a *Attempt) StreamOpenList(ctx context.Context) ([]store.StreamOpen, error) {
	return a.a.StreamOpenList(ctx)
}

// ReadStream reads a page of task id's stream entries after seq after
// (store.Executor.StreamRead), each chunk decoded: opened when this
// process has the key, left sealed when it has not.
func (e *Store) ReadStream(ctx context.Context, namespace string, id uuid.UUID, after int64, limit int) ([]store.StreamEntry, error) {
	entries, err := e.st.StreamRead(ctx, &store.StreamReadParams{Namespace: namespace, TaskID: id, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	var batch []*payload.Payload
	var at []int
	for i, en := range entries {
		if en.Kind == store.StreamChunk && len(en.Data) > 0 {
			batch = append(batch, &payload.Payload{Namespace: namespace, Task: id, Kind: payload.StreamChunk, Data: en.Data})
			at = append(at, i)
		}
	}
	if len(batch) == 0 {
		return entries, nil
	}
	if err := e.stage.Decode(ctx, batch); err != nil {
		return nil, err
	}
	for j, i := range at {
		entries[i].Data = batch[j].Data
	}
	return entries, nil
}
