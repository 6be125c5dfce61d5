package store

import (
	"time"

	"github.com/google/uuid"
)

// StreamKind is what a stream entry is.
type StreamKind string

// The kinds of stream entries, as stored.
const (
	// StreamChunk is a chunk a step (or the workflow body) wrote.
	StreamChunk StreamKind = "chunk"
	// StreamRewind voids the chunks its attempt wrote at its position to
	// its stream: the attempt failed (or was lost), and the step's next
	// attempt writes anew. Readers discard what they showed of them.
	StreamRewind StreamKind = "rewind"
	// StreamEnd closes the chunks its attempt wrote at its position to
	// its stream: the step completed, and they stand.
	StreamEnd StreamKind = "end"
)

// Valid reports whether k is one of the stored kinds.
func (k StreamKind) Valid() bool {
	return k == StreamChunk || k == StreamRewind || k == StreamEnd
}

// StreamEntry is one entry of a task's streams (the stream_entries
// table), kept beside its history.
type StreamEntry struct {
	// Seq orders the task's entries from 1, without gaps: a reader's
	// cursor.
	Seq    int64
	Stream string
	// Attempt and Position are the attempt and the step position (-1:
	// the workflow body) whose chunks the entry is, or voids, or closes.
	Attempt  int
	Position int
	Kind     StreamKind
	// Data is a chunk's payload as the payload stage encoded it (JSON, or
	// sealed); nil for a rewind or an end.
	Data      []byte
	CreatedAt time.Time
}

// StreamWrite is one entry a [StreamAppendParams] writes.
type StreamWrite struct {
	Stream   string
	Attempt  int
	Position int
	Kind     StreamKind
	// Data is the chunk, encoded by the payload stage; nil for a rewind or
	// an end.
	Data []byte
}

// StreamAppendParams are the entries [Executor.StreamAppend] writes to a
// running task's streams, fenced by its lease epoch.
type StreamAppendParams struct {
	// Namespace is the task's namespace. Required.
	Namespace string
	TaskID    uuid.UUID
	// Epoch is the writing attempt's lease epoch: nothing is written
	// unless the task is running under it.
	Epoch   int64
	Entries []StreamWrite
}

// MaxStreamAppend bounds the entries of one [Executor.StreamAppend].
const MaxStreamAppend = 1_000

// StreamReadParams select what [Executor.StreamRead] reads: a task's
// entries after a seq, in order.
type StreamReadParams struct {
	// Namespace is the task's namespace. Required.
	Namespace string
	TaskID    uuid.UUID
	// After is the seq the page begins after (0: from the first).
	After int64
	// Limit bounds the page's entries: 1 to [MaxStreamPage]; 0 takes
	// [MaxStreamPage].
	Limit int
	// Step, when set, reads only the entries one attempt of one step
	// wrote (a remote step's, to close its streams with their record).
	Step *StreamStep
}

// StreamStep names one attempt of one step among a task's stream
// entries.
type StreamStep struct {
	Position int
	Attempt  int
}

// MaxStreamPage bounds the entries of one [Executor.StreamRead].
const MaxStreamPage = 1_000

// StreamOpenListParams name the task whose open chunks
// [Executor.StreamOpenList] lists.
type StreamOpenListParams struct {
	// Namespace is the task's namespace. Required.
	Namespace string
	TaskID    uuid.UUID
	// Before lists only the chunks of attempts before it.
	Before int
}

// StreamOpen is chunks of one attempt at one position to one stream that
// neither an end nor a rewind closed: what a lost attempt left.
type StreamOpen struct {
	Stream   string
	Attempt  int
	Position int
}

// StreamRemoveParams name the task whose entries [Executor.StreamRemove]
// removes.
type StreamRemoveParams struct {
	// Namespace is the task's namespace. Required.
	Namespace string
	TaskID    uuid.UUID
}

// StreamRemoveExpiredParams bound [Executor.StreamRemoveExpired].
type StreamRemoveExpiredParams struct {
	// Namespace is the namespace whose entries go. Required.
	Namespace string
	// Before: entries written before it go.
	Before time.Time
	// Max bounds the entries removed.
	Max int
}
