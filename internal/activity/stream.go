package activity

import (
	"context"
	"encoding/json"

	"github.com/cockroachdb/errors"
)

// StreamWriter writes a step's chunks to its task's streams (see
// activities.Stream): the executor puts one into every step's context
// with [WithStream], bound to the step's attempt and position. Write
// queues data (a chunk's JSON) to the stream name and returns; it fails
// with the writer's earlier failure (a fenced attempt), or at once for a
// chunk over a limit (marked [ErrStreamTooLarge]). It is safe for
// concurrent use.
type StreamWriter interface {
	Write(ctx context.Context, name string, data json.RawMessage) error
}

type streamKey struct{}

// WithStream returns a context whose step writes its streams through w.
func WithStream(ctx context.Context, w StreamWriter) context.Context {
	return context.WithValue(ctx, streamKey{}, w)
}

// ErrStreamTooLarge marks a chunk, or a stream, over its limit
// (activities.MaxStreamChunkBytes, MaxStreamBytes), or a step writing to
// more streams than activities.MaxStreams: nothing of the chunk is
// written. It is marked permanent as well: retrying writes as much.
var ErrStreamTooLarge = errors.New("stream too large")

var errNoStream = errors.New("no stream: Stream and Progress work inside a step run by a cairn worker")

// Stream writes data to the stream name of ctx's step: what
// activities.Stream does. Outside a step it is an error.
func Stream(ctx context.Context, name string, data json.RawMessage) error {
	w, ok := ctx.Value(streamKey{}).(StreamWriter)
	if !ok {
		return errors.WithStack(errNoStream)
	}
	return w.Write(ctx, name, data)
}
