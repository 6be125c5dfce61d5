package activities

import (
	"context"
	"encoding/json"
	"github.com/cairnflow/cairn/history"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/activity"
)

// Limits of streams, checked by the writer ([Stream]): a chunk or a
// stream over one is refused with an error marked [ErrStreamTooLarge]
// (and permanent), nothing of the chunk written.
const (
	// MaxStreamChunkBytes bounds one chunk's JSON (a text chunk's, quoted).
	MaxStreamChunkBytes = 64 << 10
	// MaxStreamBytes bounds what one attempt of a step writes to one
	// stream, in chunks' JSON bytes.
	MaxStreamBytes = 32 << 20
	// MaxStreams bounds the streams one attempt writes to, over its steps
	// and workflow body: each adds one stream_closed to the history.
	MaxStreams = history.MaxStreams
)

// ProgressStream is the stream [Progress] (and workflow.Progress) writes to.
const ProgressStream = "progress"

// ErrStreamTooLarge marks a chunk or a stream over its limit
// ([MaxStreamChunkBytes], [MaxStreamBytes], [MaxStreams]).
var ErrStreamTooLarge = activity.ErrStreamTooLarge

// Stream writes chunk to the stream name of the task the step belongs to:
// text a reader sees as it is written (an LLM's tokens, a log line),
// without it entering the task's history. Readers (Client.Stream, the
// HTTP API's GET /v1/tasks/{id}/stream, `cairn task watch`) get chunks in
// order, tagged with the step's attempt; when the attempt fails and the
// step retries, they are told to discard its chunks (a rewind) before the
// next attempt's arrive. The history records one stream_closed per stream
// and attempt: how many chunks, bytes, and their digest.
//
// Stream queues the chunk and returns: chunks are written in batches, in
// the background, and announced to readers (a few milliseconds). It
// returns an error for a chunk over a limit (marked [ErrStreamTooLarge]),
// and once the attempt can no longer write (its lease lost). name is 1 to
// 100 printable characters without spaces. Outside a step run by a cairn
// worker it is an error. In an encrypted namespace chunks are sealed like
// every payload.
func Stream(ctx context.Context, name string, chunk string) error {
	data, err := json.Marshal(chunk)
	if err != nil {
		return errors.Wrapf(err, "stream %q: encode the chunk", name)
	}
	return activity.Stream(ctx, name, data)
}

// ProgressData is a chunk of the [ProgressStream]: how far a task has
// come.
type ProgressData struct {
	Done    int    `json:"done"`
	Total   int    `json:"total,omitempty"`
	Message string `json:"message,omitempty"`
}

// Progress writes how far the step has come to the task's
// [ProgressStream], as [Stream] writes a chunk: done of total (0: not
// known), with a message.
func Progress(ctx context.Context, done, total int, message string) error {
	data, err := json.Marshal(ProgressData{Done: done, Total: total, Message: message})
	if err != nil {
		return errors.Wrap(err, "progress: encode")
	}
	return activity.Stream(ctx, ProgressStream, data)
}
