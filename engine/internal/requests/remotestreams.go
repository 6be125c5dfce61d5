package requests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// ReleaseRemote hands the step a claim holds back to its queue, unclaimed
// (RemoteStepRelease), and rewinds what the claim wrote to the task's
// streams, in one transaction: the next claim writes anew. A claim that
// no longer holds the step is refused with store.ErrNotFound.
func ReleaseRemote(ctx context.Context, s store.Store, ref store.RemoteStepRef) error {
	tx, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := tx.RemoteStepRelease(ctx, &ref); err != nil {
		return err
	}
	if err := closeStreamsIn(ctx, tx, &store.RemoteStreamCloseParams{Namespace: ref.Namespace, TaskID: ref.TaskID,
		Position: ref.Position, Kind: store.StreamRewind}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// streamTally counts a claim's chunks per stream, as the Go executor's
// stream writer does for a step: chunks, bytes and the SHA-256 of their
// JSON, each followed by a newline. A rewind (a release's) voids what
// came before it.
type streamTally struct {
	position int
	outcome  string
	order    []string
	by       map[string]*tally
}

type tally struct {
	chunks, bytes int64
	sum           hash.Hash
	open          bool
}

func newStreamTally(position int, outcome string) *streamTally {
	return &streamTally{position: position, outcome: outcome, by: map[string]*tally{}}
}

func (t *streamTally) add(e store.StreamEntry) {
	st := t.by[e.Stream]
	if st == nil {
		st = &tally{sum: sha256.New()}
		t.by[e.Stream] = st
		t.order = append(t.order, e.Stream)
	}
	if e.Kind != store.StreamChunk {
		*st = tally{sum: sha256.New()}
		return
	}
	st.chunks++
	st.bytes += int64(len(e.Data))
	st.sum.Write(e.Data)
	st.sum.Write([]byte{'\n'})
	st.open = true
}

// records returns the record of each open stream, in first-write order;
// nil unless recorded (the chunks were decoded).
func (t *streamTally) records(recorded bool) []history.StreamClosedData {
	if !recorded {
		return nil
	}
	var out []history.StreamClosedData
	for _, name := range t.order {
		st := t.by[name]
		if !st.open {
			continue
		}
		out = append(out, history.StreamClosedData{Name: name, Position: t.position, Chunks: st.chunks, Bytes: st.bytes,
			Digest: hex.EncodeToString(st.sum.Sum(nil)), Outcome: t.outcome})
	}
	return out
}

func (t *streamTally) anyOpen() bool {
	for _, st := range t.by {
		if st.open {
			return true
		}
	}
	return false
}

// settleStates keeps the state the last remote outcome of each task left,
// so that the answers of a fan-out, which come one after another, read
// only the events appended since (the workflow's, the other answers')
// rather than the task's whole history each: n answers read O(n) events,
// not O(n²). An entry the log has moved past is brought up to date; one
// that no longer fits it (a conflict) is dropped and the log read whole.
var settleStates = &stateCache{max: 256, m: map[taskKey]history.State{}}

type taskKey struct {
	namespace string
	id        uuid.UUID
}

type stateCache struct {
	mu  sync.Mutex
	max int
	m   map[taskKey]history.State
}

// load returns the task's state as ex reads it now.
func (c *stateCache) load(ctx context.Context, ex store.Executor, namespace string, id uuid.UUID) (history.State, error) {
	c.mu.Lock()
	known, ok := c.m[taskKey{namespace, id}]
	c.mu.Unlock()
	if ok {
		since, err := ex.EventList(ctx, &store.EventListParams{Namespace: namespace, After: map[uuid.UUID]int64{id: known.LastSeq}})
		if err != nil {
			return history.State{}, err
		}
		if state, err := history.ApplyAll(known, since[id]); err == nil {
			return state, nil
		}
		c.forget(namespace, id)
	}
	events, err := store.TaskEvents(ctx, ex, namespace, id)
	if err != nil {
		return history.State{}, err
	}
	return history.Replay(events)
}

// keep remembers state, the task's as committed, unless the task has
// finished (no answer will come); a full cache lets an arbitrary entry go.
func (c *stateCache) keep(namespace string, id uuid.UUID, state history.State) {
	if state.Status.Terminal() {
		c.forget(namespace, id)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[taskKey{namespace, id}] = state
}

func (c *stateCache) forget(namespace string, id uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, taskKey{namespace, id})
}
