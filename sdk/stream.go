package sdk

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// StreamKind is what a [StreamItem] is.
type StreamKind string

// The kinds of [StreamItem].
const (
	// StreamChunk is a chunk a step wrote (activities.Stream, Progress)
	// or the workflow body (workflow.Progress).
	StreamChunk StreamKind = "chunk"
	// StreamRewind voids the chunks its Attempt wrote at its Position to
	// its Stream: the attempt failed (or was lost), and the step's next
	// attempt writes anew. A reader discards what it showed of them.
	StreamRewind StreamKind = "rewind"
	// StreamEnd closes the chunks its Attempt wrote at its Position to
	// its Stream: the step completed, and they stand.
	StreamEnd StreamKind = "end"
	// StreamStatus says the task's status (Status): the first item a
	// reader gets, then each change it sees; the last is a finished
	// status, after every entry.
	StreamStatus StreamKind = "status"
	// StreamEvent is an event appended to the task's history (Event),
	// with [StreamOpts.Events].
	StreamEvent StreamKind = "event"
	// StreamIdle says nothing arrived for [StreamOpts.Heartbeat].
	StreamIdle StreamKind = "idle"
)

// StreamItem is what a reader of a task's streams gets ([Client.Stream]).
type StreamItem struct {
	// Seq is a chunk's, rewind's or end's place among the task's entries
	// (from 1): the cursor to resume after ([Client.Stream]'s from, an
	// SSE Last-Event-ID). 0 for the other kinds.
	Seq  int64
	Kind StreamKind
	// Stream, Attempt and Position (-1: the workflow body) are a chunk's,
	// rewind's or end's.
	Stream   string
	Attempt  int
	Position int
	// Data is a chunk's JSON: a string for activities.Stream's text (see
	// [StreamItem.Text]), an object for progress. In an encrypted
	// namespace it is the sealed object when this client has no key.
	Data json.RawMessage
	// Time is when the entry was written.
	Time time.Time
	// Status is the task's status, for a StreamStatus item.
	Status history.Status
	// Event is the appended event, for a StreamEvent item.
	Event *history.Event
}

// Text returns a text chunk's text (one activities.Stream wrote); "" for
// another item.
func (i StreamItem) Text() string {
	var s string
	if i.Kind != StreamChunk || json.Unmarshal(i.Data, &s) != nil {
		return ""
	}
	return s
}

// StreamOpts are the options of [Client.Stream]; nil takes the defaults.
type StreamOpts struct {
	// Events adds the task's history events as they are appended
	// (StreamEvent items), from its first.
	Events bool
	// Heartbeat, when positive, yields a StreamIdle item whenever nothing
	// else arrived for that long (a server's keep-alive).
	Heartbeat time.Duration
	// Poll is how often the reader looks at the task while notifications
	// arrive: how late a history event (Events) or a lost notification is
	// seen at most. Default 1s; at least 10ms.
	Poll time.Duration
}

// streamPoll is how often a reader looks at the task while notifications
// arrive, by default (StreamOpts.Poll): a history event announces nothing
// (StreamOpts.Events), and a lost notification is caught up this late.
// While they do not arrive it polls from streamPollMin, doubling to
// streamPollMax.
const (
	streamPoll    = time.Second
	streamPollMin = 10 * time.Millisecond
	streamPollMax = 250 * time.Millisecond
)

// Stream reads task id's streams (what its steps and workflow wrote with
// activities.Stream, Progress and workflow.Progress) after entry from (0:
// from the first), in order, as they are written, until the task
// finishes and every entry is read, or ctx ends (its error is yielded).
// The first item is the task's status; each chunk, rewind and end
// follows in order; the last item is the task's finished status.
//
// A rewind says that an attempt's chunks of a step are void (the attempt
// failed and the step runs again): a reader that shows chunks drops
// those, and shows the next attempt's as they come. A reader never sees
// the attempts mixed without a rewind between.
//
// The reader waits on the client's notifier (LISTEN, or SQLite's
// announcements): a chunk reaches it a few milliseconds after it is
// written; it polls only when notifications are not arriving. A task not
// in the client's namespace yields an error marked [ErrNotFound]. A run
// that continued as new ends its stream: read the next run's.
func (c *Client) Stream(ctx context.Context, id uuid.UUID, from int64, opts *StreamOpts) iter.Seq2[StreamItem, error] {
	o := orZero(opts)
	return func(yield func(StreamItem, error) bool) {
		if from < 0 {
			yield(StreamItem{}, errmark.Mark(errors.Newf("stream from %d: a seq is 0 or more", from), ErrInvalid))
			return
		}
		if o.Heartbeat < 0 {
			yield(StreamItem{}, errmark.Mark(errors.Newf("stream: heartbeat %s is negative", o.Heartbeat), ErrInvalid))
			return
		}
		switch {
		case o.Poll == 0:
			o.Poll = streamPoll
		case o.Poll < streamPollMin:
			yield(StreamItem{}, errmark.Mark(errors.Newf("stream: poll %s is under %s", o.Poll, streamPollMin), ErrInvalid))
			return
		}
		r := &streamReader{c: c, id: id, after: from, opts: o, yield: yield}
		r.run(ctx)
	}
}

// Stream reads the run's streams from the first entry, as
// [Client.Stream] does.
func (r *Run[Out]) Stream(ctx context.Context, opts *StreamOpts) iter.Seq2[StreamItem, error] {
	return r.client.Stream(ctx, r.ID, 0, opts)
}

// streamReader is one Client.Stream, on the caller's goroutine.
type streamReader struct {
	c      *Client
	id     uuid.UUID
	after  int64 // the last entry yielded
	events int64 // the last event yielded (Events)
	status history.Status
	opts   StreamOpts
	yield  func(StreamItem, error) bool
	idle   time.Time // when the last item was yielded (Heartbeat)
}

func (r *streamReader) run(ctx context.Context) {
	var wake <-chan struct{}
	l := r.c.waitListener()
	if l != nil {
		ch, stop := l.WaitStream(r.id)
		defer stop()
		wake = ch
	}
	live := func() bool { return l != nil && l.Live() }
	interval := streamPollMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	r.idle = time.Now()
	for {
		finished, fresh, ok := r.read(ctx)
		if !ok || finished {
			return
		}
		switch {
		case fresh:
			interval = streamPollMin // the status is read when the entries pause
		case live():
			interval = r.opts.Poll
		default:
			interval = min(2*interval, streamPollMax, r.opts.Poll)
		}
		wait := interval
		if r.opts.Heartbeat > 0 {
			wait = min(wait, max(time.Until(r.idle.Add(r.opts.Heartbeat)), 0))
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			r.yield(StreamItem{}, ctx.Err())
			return
		case <-wake:
			interval = streamPollMin
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if r.opts.Heartbeat > 0 && time.Since(r.idle) >= r.opts.Heartbeat {
			if !r.emit(StreamItem{Kind: StreamIdle, Time: time.Now()}) {
				return
			}
		}
	}
}

// read yields what is new: entries, then, when there were none, the
// status when it changed and events; finished once a finished task's
// entries are all read. fresh says entries came: the status is not read
// then (a reader of a busy stream pays one query per wake-up), and the
// caller looks again soon. ok is false once the reader stopped (the
// caller's yield, an error).
func (r *streamReader) read(ctx context.Context) (finished, fresh, ok bool) {
	if fresh, ok = r.readEntries(ctx); !ok || fresh {
		return false, fresh, ok
	}
	// The status, then the entries again: those the task wrote before it
	// finished are all read.
	t, err := r.c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: r.c.namespace, ID: r.id})
	if err != nil {
		r.yield(StreamItem{}, errors.Wrapf(err, "stream task %s", r.id))
		return false, false, false
	}
	status := t.Status
	if status != r.status && !status.Terminal() {
		r.status = status
		if !r.emit(StreamItem{Kind: StreamStatus, Status: status, Time: t.UpdatedAt}) {
			return false, false, false
		}
	}
	if r.opts.Events && !r.readEvents(ctx) {
		return false, false, false
	}
	if !status.Terminal() {
		return false, false, true
	}
	if _, ok := r.readEntries(ctx); !ok {
		return false, false, false
	}
	r.status = status
	return true, false, r.emit(StreamItem{Kind: StreamStatus, Status: status, Time: t.UpdatedAt})
}

// readEntries yields the entries written since the last one yielded, and
// says whether there were any.
func (r *streamReader) readEntries(ctx context.Context) (fresh, ok bool) {
	for {
		entries, err := r.c.store.ReadStream(ctx, r.c.namespace, r.id, r.after, store.MaxStreamPage)
		if err != nil {
			r.yield(StreamItem{}, errors.Wrapf(err, "stream task %s", r.id))
			return fresh, false
		}
		for _, e := range entries {
			r.after = e.Seq
			fresh = true
			if !r.emit(StreamItem{Seq: e.Seq, Kind: StreamKind(e.Kind), Stream: e.Stream, Attempt: e.Attempt, Position: e.Position,
				Data: json.RawMessage(e.Data), Time: e.CreatedAt}) {
				return fresh, false
			}
		}
		if len(entries) < store.MaxStreamPage {
			return fresh, true
		}
	}
}

// readEvents yields the events appended since the last one yielded.
func (r *streamReader) readEvents(ctx context.Context) bool {
	for {
		page, err := r.c.HistoryPage(ctx, r.id, HistoryPageOpts{After: r.events})
		if err != nil {
			r.yield(StreamItem{}, errors.Wrapf(err, "stream task %s", r.id))
			return false
		}
		for i := range page.Events {
			e := page.Events[i]
			if e.Seq <= r.events {
				continue
			}
			r.events = e.Seq
			if !r.emit(StreamItem{Kind: StreamEvent, Event: &e, Time: e.At}) {
				return false
			}
		}
		if page.Next == 0 {
			return true
		}
	}
}

func (r *streamReader) emit(it StreamItem) bool {
	r.idle = time.Now()
	return r.yield(it, nil)
}
