package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// maxStreamQueue bounds the entries an attempt's writers may have queued
// and not yet written: a step writing faster than the database takes
// them waits in Write (backpressure) rather than growing memory.
const maxStreamQueue = 10_000

// streamWriter writes one attempt's streams (activities.Stream, Progress,
// workflow.Progress): chunks are queued by the step's goroutines and the
// workflow body, and written by one flusher goroutine in batches (group
// commit: a write in flight gathers the next batch), each batch one
// fenced statement that announces the task to readers. It closes the
// streams of a step that completed (end entries, then stream_closed with
// the step's record), rewinds those of a step that failed (rewind
// entries, at once; stream_closed with the attempt's outcome), and at
// its first write rewinds what a lost earlier attempt left open.
//
// It is made per attempt, costs nothing until a stream is written, and
// is stopped when the attempt ends.
type streamWriter struct {
	a       *edge.Attempt
	attempt int
	logger  *slog.Logger
	ctx     context.Context // the attempt's durable context: writes outlive a stop

	mu   sync.Mutex
	cond *sync.Cond // broadcast when the queue grows or shrinks, written grows, err is set, or stopping
	// queue holds the entries waiting for the flusher: appended by
	// writers, taken by the flusher, under mu.
	queue   []store.StreamWrite
	queued  int64 // entries ever queued
	written int64 // entries the flusher is done with (written, or dropped after err)
	err     error // the first write failure: later writes return it
	// streams are the attempt's streams by stream and position, in first
	// write order (order).
	streams  map[streamKey]*streamStat
	order    []streamKey
	started  bool          // the flusher runs
	stopping bool          // no more writes: the flusher drains and exits
	checked  bool          // the first flush has rewound what earlier attempts left open
	done     chan struct{} // closed when the flusher exits
}

type streamKey struct {
	name     string
	position int
}

type streamStat struct {
	chunks, bytes int64
	sum           hash.Hash
	// outcome is "" while the stream is open, else history's
	// StreamCompleted or StreamRewound; recorded once its stream_closed is
	// handed out.
	outcome  string
	recorded bool
}

func newStreamWriter(a *edge.Attempt, attempt int, logger *slog.Logger) *streamWriter {
	w := &streamWriter{a: a, attempt: attempt, logger: logger, ctx: a.DurableContext(), streams: map[streamKey]*streamStat{},
		done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// step returns the writer of the step at position, for its context.
func (w *streamWriter) step(position int) activity.StreamWriter {
	return stepStream{w: w, position: position}
}

type stepStream struct {
	w        *streamWriter
	position int
}

func (s stepStream) Write(_ context.Context, name string, data json.RawMessage) error {
	return s.w.write(name, s.position, data)
}

// write queues a chunk of the stream name at position.
func (w *streamWriter) write(name string, position int, data json.RawMessage) error {
	if err := history.ValidStreamName(name); err != nil {
		return activities.Permanent(err)
	}
	if len(data) > activities.MaxStreamChunkBytes {
		return tooLarge(errors.Newf("stream %q: a chunk of %d bytes is over the limit of %d (activities.MaxStreamChunkBytes)",
			name, len(data), activities.MaxStreamChunkBytes))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		return w.err
	case w.stopping:
		return errors.Newf("stream %q: the attempt has ended", name)
	}
	key := streamKey{name, position}
	st := w.streams[key]
	if st == nil {
		if len(w.streams) >= activities.MaxStreams {
			return tooLarge(errors.Newf("stream %q: the attempt writes to %d streams already, the limit (activities.MaxStreams)", name, len(w.streams)))
		}
		st = &streamStat{sum: sha256.New()}
		w.streams[key] = st
		w.order = append(w.order, key)
	}
	switch {
	case st.outcome != "":
		return errors.Newf("stream %q of step %d has ended (%s)", name, position, st.outcome)
	case st.bytes+int64(len(data)) > activities.MaxStreamBytes:
		return tooLarge(errors.Newf("stream %q: %d bytes written, a chunk of %d more is over the limit of %d (activities.MaxStreamBytes)",
			name, st.bytes, len(data), activities.MaxStreamBytes))
	}
	for len(w.queue) >= maxStreamQueue && w.err == nil {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	st.chunks++
	st.bytes += int64(len(data))
	st.sum.Write(data)
	st.sum.Write([]byte{'\n'})
	w.enqueueLocked(store.StreamWrite{Stream: name, Attempt: w.attempt, Position: position, Kind: store.StreamChunk, Data: data})
	return nil
}

func tooLarge(err error) error {
	return activities.Permanent(errmark.Mark(err, activities.ErrStreamTooLarge))
}

// enqueueLocked queues e and wakes the flusher, starting it on the first
// entry.
func (w *streamWriter) enqueueLocked(e store.StreamWrite) {
	w.queue = append(w.queue, e)
	w.queued++
	if !w.started {
		w.started = true
		go w.run()
	}
	w.cond.Broadcast()
}

// run is the flusher: it writes what is queued, a batch at a time, until
// stopped with nothing queued.
func (w *streamWriter) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.stopping {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return
		}
		n := min(len(w.queue), store.MaxStreamAppend)
		batch := make([]store.StreamWrite, n)
		copy(batch, w.queue)
		w.queue = append(w.queue[:0], w.queue[n:]...)
		first := !w.checked
		w.checked = true
		failed := w.err
		w.cond.Broadcast() // room in the queue
		w.mu.Unlock()
		var err error
		if failed == nil {
			if first {
				err = w.rewindLost()
			}
			if err == nil {
				_, err = w.a.WriteStream(w.ctx, batch)
			}
		}
		w.mu.Lock()
		w.written += int64(n)
		if err != nil && w.err == nil {
			w.err = errors.Wrap(err, "write the task's streams")
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// rewindLost rewinds what earlier attempts left open in the task's
// streams, the chunks of a step an attempt lost (crashed, its lease
// expired) was writing, before this attempt's first entries. The
// workflow body's are left: its progress is not written again; so are
// remote steps', numbered by their own attempts, which their workers
// write and their outcomes close.
func (w *streamWriter) rewindLost() error {
	if w.attempt <= 1 {
		return nil
	}
	open, err := w.a.StreamOpenList(w.ctx)
	if err != nil {
		return err
	}
	state := w.a.State()
	var rewinds []store.StreamWrite
	for _, o := range open {
		if _, remote := state.RemoteAt(o.Position); o.Position >= 0 && !remote {
			rewinds = append(rewinds, store.StreamWrite{Stream: o.Stream, Attempt: o.Attempt, Position: o.Position, Kind: store.StreamRewind})
		}
	}
	for len(rewinds) > 0 {
		n := min(len(rewinds), store.MaxStreamAppend)
		if _, err := w.a.WriteStream(w.ctx, rewinds[:n]); err != nil {
			return err
		}
		rewinds = rewinds[n:]
	}
	return nil
}

// waitLocked waits until the flusher is done with every entry queued so
// far, and returns the writer's failure.
func (w *streamWriter) waitLocked() error {
	target := w.queued
	for w.written < target && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// closeStep ends the open streams of the step at position, which
// completed: it writes their end entries and returns their stream_closed,
// to record with the step. An error (the entries could not be written)
// fails the record, so that the step runs again and its chunks are
// rewound.
func (w *streamWriter) closeStep(position int) ([]history.Payload, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return nil, nil
	}
	var closed []history.Payload
	for _, key := range w.order {
		st := w.streams[key]
		if key.position != position || st.outcome != "" {
			continue
		}
		st.outcome = history.StreamCompleted
		w.enqueueLocked(store.StreamWrite{Stream: key.name, Attempt: w.attempt, Position: key.position, Kind: store.StreamEnd})
		closed = append(closed, w.closedLocked(key))
	}
	if len(closed) == 0 {
		return nil, nil
	}
	if err := w.waitLocked(); err != nil {
		return nil, err
	}
	return closed, nil
}

// rewindStep rewinds the open streams of the step at position, which
// failed: readers are told at once to discard its chunks. Their
// stream_closed goes with the attempt's outcome ([streamWriter.finish]).
func (w *streamWriter) rewindStep(position int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rewindLocked(func(k streamKey) bool { return k.position == position })
}

func (w *streamWriter) rewindLocked(which func(streamKey) bool) {
	if w.stopping {
		return
	}
	for _, key := range w.order {
		st := w.streams[key]
		if !which(key) || st.outcome != "" {
			continue
		}
		st.outcome = history.StreamRewound
		w.enqueueLocked(store.StreamWrite{Stream: key.name, Attempt: w.attempt, Position: key.position, Kind: store.StreamRewind})
	}
}

// finish closes what is still open as the attempt ends with outcome
// events: the streams of steps that did not complete are rewound, the
// workflow body's ended. It returns the stream_closed not yet recorded,
// to append with the outcome, once their entries are written; nothing
// when they could not be (the lease lost: the next attempt rewinds).
func (w *streamWriter) finish() []history.Payload {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return nil
	}
	w.closeOpenLocked()
	var closed []history.Payload
	for _, key := range w.order {
		if st := w.streams[key]; !st.recorded && st.outcome != "" {
			closed = append(closed, w.closedLocked(key))
		}
	}
	if err := w.waitLocked(); err != nil {
		w.logger.Debug("worker: streams not closed", "task_id", w.a.Task.ID, "err", err.Error())
		return nil
	}
	return closed
}

// closeOpenLocked rewinds the open streams of steps and ends the body's.
func (w *streamWriter) closeOpenLocked() {
	w.rewindLocked(func(k streamKey) bool { return k.position >= 0 })
	if w.stopping {
		return
	}
	for _, key := range w.order {
		if st := w.streams[key]; key.position < 0 && st.outcome == "" {
			st.outcome = history.StreamCompleted
			w.enqueueLocked(store.StreamWrite{Stream: key.name, Attempt: w.attempt, Position: key.position, Kind: store.StreamEnd})
		}
	}
}

// closedLocked returns key's stream_closed and marks it recorded.
func (w *streamWriter) closedLocked(key streamKey) history.Payload {
	st := w.streams[key]
	st.recorded = true
	var digest string
	if st.chunks > 0 {
		digest = hex.EncodeToString(st.sum.Sum(nil))
	}
	return history.StreamClosedData{Name: key.name, Position: key.position, Chunks: st.chunks, Bytes: st.bytes, Digest: digest, Outcome: st.outcome}
}

// stop ends the writer as its attempt ends: what is still open is closed
// (rewound, ended) without a record, what is queued written, and the
// flusher stopped. Later writes fail.
func (w *streamWriter) stop() {
	w.mu.Lock()
	if !w.started {
		w.stopping = true
		w.mu.Unlock()
		return
	}
	w.closeOpenLocked()
	w.stopping = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
}

// withClosedStreams puts before ev (a step's record) the stream_closed of
// the streams the step wrote, once their ends are written; other records
// (a timer's) pass as they are.
func (h *Handler) withClosedStreams(ctx context.Context, a *edge.Attempt, w *streamWriter, step history.Payload, ev edge.Events) (edge.Events, error) {
	done, ok := step.(history.StepCompletedData)
	if !ok {
		return ev, nil
	}
	closed, err := w.closeStep(done.Position)
	if err != nil || len(closed) == 0 {
		return ev, err
	}
	cev, err := a.Encode(ctx, closed...)
	if err != nil {
		return ev, err
	}
	return cev.Then(ev), nil
}
