package plan

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// MaxStreamEntryBytes bounds one stream entry's data as stored (a chunk
// encoded by the payload stage: sealing grows it by a third and some).
// Writers bound chunks before they encode them (activities'
// MaxStreamChunkBytes); this is the store's own bound.
const MaxStreamEntryBytes = 256 << 10

// CheckStreamAppend refuses what no driver writes: an append without a
// namespace, epoch or entries, with too many, or an entry with a bad
// name, kind or size.
func CheckStreamAppend(p *store.StreamAppendParams) error {
	switch {
	case p.Namespace == "":
		return errors.Newf("append to the streams of task %s: namespace is required", p.TaskID)
	case p.Epoch <= 0:
		return errors.Newf("append to the streams of task %s: a lease epoch is required", p.TaskID)
	case len(p.Entries) == 0 || len(p.Entries) > store.MaxStreamAppend:
		return errors.Newf("append to the streams of task %s: %d entries, expected 1 to %d", p.TaskID, len(p.Entries), store.MaxStreamAppend)
	}
	for i, e := range p.Entries {
		switch {
		case history.ValidStreamName(e.Stream) != nil:
			return errors.Wrapf(history.ValidStreamName(e.Stream), "append to the streams of task %s: entry %d", p.TaskID, i)
		case !e.Kind.Valid():
			return errors.Newf("append to the streams of task %s: entry %d: kind %q", p.TaskID, i, e.Kind)
		case e.Position < -1 || e.Attempt < 1:
			return errors.Newf("append to the streams of task %s: entry %d: attempt %d, position %d", p.TaskID, i, e.Attempt, e.Position)
		case len(e.Data) > MaxStreamEntryBytes:
			return errors.Newf("append to the streams of task %s: entry %d holds %d bytes, over the limit of %d", p.TaskID, i, len(e.Data), MaxStreamEntryBytes)
		case e.Kind == store.StreamChunk && e.Data == nil:
			return errors.Newf("append to the streams of task %s: entry %d: a chunk without data", p.TaskID, i)
		}
	}
	return nil
}

// StreamPage returns the page size of a stream read, or why p cannot be
// read.
func StreamPage(p *store.StreamReadParams) (int, error) {
	switch {
	case p.Namespace == "":
		return 0, errors.Newf("read the streams of task %s: namespace is required", p.TaskID)
	case p.Limit < 0 || p.Limit > store.MaxStreamPage:
		return 0, errors.Newf("read the streams of task %s: limit %d, expected 1 to %d", p.TaskID, p.Limit, store.MaxStreamPage)
	case p.Limit == 0:
		return store.MaxStreamPage, nil
	}
	return p.Limit, nil
}
