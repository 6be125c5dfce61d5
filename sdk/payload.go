package sdk

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
)

// DefaultMaxPayloadBytes is the default of [ClientConfig.MaxPayloadBytes]
// and [WorkerConfig.MaxPayloadBytes]: 1 MiB of JSON. A task's input is
// stored in its history and decoded again on every attempt, and every
// step's output is stored and decoded on every later attempt too: large
// or sensitive data goes by reference (a blob a step keeps with
// activities.PutBlob, a URL, an object key), not through the queue.
const DefaultMaxPayloadBytes = 1 << 20

// DefaultBlobThreshold is the default of [WorkerConfig.BlobThreshold]: a
// step output over 64 KiB is kept as a blob, by reference.
const DefaultBlobThreshold = 64 << 10

// ErrPayloadTooLarge marks a start whose input (or a schedule whose
// input) is over the client's MaxPayloadBytes; nothing was written. The
// error is a [*PayloadTooLargeError] (errors.As finds it) and is marked
// [ErrInvalid] too. The HTTP API answers it 413 payload_too_large. A blob
// over [payload.MaxBlobBytes] is refused with it too.
var ErrPayloadTooLarge = payload.ErrTooLarge

// PayloadTooLargeError says which payload was over the limit, and by how
// much.
type PayloadTooLargeError struct {
	What  string // "input", "the output of step 2 (ocr)"
	Size  int    // bytes of its JSON
	Limit int    // MaxPayloadBytes in force
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes of JSON, over the limit of %d bytes (MaxPayloadBytes): pass large data by reference (a URL or an object key)",
		e.What, e.Size, e.Limit)
}

// checkPayloadSize refuses raw, the JSON of what, when it is over limit.
func checkPayloadSize(what string, raw []byte, limit int) error {
	if len(raw) <= limit {
		return nil
	}
	return errmark.Mark(&PayloadTooLargeError{What: what, Size: len(raw), Limit: limit}, ErrPayloadTooLarge)
}

// payloadLimit fills the default of a MaxPayloadBytes setting and refuses
// a negative one; what names the setting in the error.
func payloadLimit(what string, n int) (int, error) {
	switch {
	case n < 0:
		return 0, errors.Newf("%s %d must not be negative (0: the default, %d)", what, n, DefaultMaxPayloadBytes)
	case n == 0:
		return DefaultMaxPayloadBytes, nil
	}
	return n, nil
}

// DefaultMaxHistoryEvents is the default of [WorkerConfig.MaxHistoryEvents]:
// a task's history of 50,000 events (Temporal's bound is 51,200).
const DefaultMaxHistoryEvents = 50_000
