package history

import (
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
)

// StreamClosedData is the payload of stream_closed: the chunks attempt
// Event.Attempt wrote at Position (a step's; -1: the workflow body's) to
// the stream Name, kept beside the history (not in it), ended. Outcome
// says how: [StreamCompleted] (the step completed; its chunks stand) or
// [StreamRewound] (the attempt failed; readers were told to discard its
// chunks). Chunks, Bytes and Digest (the SHA-256, in hex, of the chunks'
// JSON, in order, each followed by a newline) describe what was written,
// so that the history says how much a stream held without holding it.
// One such event is written per stream, position and attempt, whatever
// the number of chunks.
type StreamClosedData struct {
	Name     string `json:"name"`
	Position int    `json:"position"`
	Chunks   int64  `json:"chunks"`
	Bytes    int64  `json:"bytes"`
	Digest   string `json:"digest,omitempty"`
	Outcome  string `json:"outcome"`
}

// The outcomes of a stream_closed.
const (
	StreamCompleted = "completed"
	StreamRewound   = "rewound"
)

// MaxStreamNameBytes bounds a stream's name in bytes.
const MaxStreamNameBytes = 100

// MaxStreams bounds the streams one attempt of a task writes to (over its
// steps and workflow body), and those one claim of a remote step writes
// to: each is recorded in the history when it closes.
const MaxStreams = 64

// ValidStreamName returns why name cannot name a stream, or nil: a name
// is 1..[MaxStreamNameBytes] bytes of printable UTF-8 (no spaces).
func ValidStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("a stream name must not be empty")
	case len(name) > MaxStreamNameBytes:
		return errors.Newf("stream name of %d bytes is over the limit of %d", len(name), MaxStreamNameBytes)
	case !utf8.ValidString(name):
		return errors.Newf("stream name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return errors.Newf("stream name %q holds the character %U (use printable characters, no spaces)", name, r)
		}
	}
	return nil
}

func (s *State) applyStreamClosed(e Event, p StreamClosedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if err := ValidStreamName(p.Name); err != nil {
		return invalidf(err, "event %d (%s)", e.Seq, StreamClosed)
	}
	switch {
	case p.Position < -1:
		return invalidf(nil, "event %d (%s): position %d", e.Seq, StreamClosed, p.Position)
	case p.Chunks < 0 || p.Bytes < 0:
		return invalidf(nil, "event %d (%s): %d chunks of %d bytes", e.Seq, StreamClosed, p.Chunks, p.Bytes)
	case p.Outcome != StreamCompleted && p.Outcome != StreamRewound:
		return invalidf(nil, "event %d (%s): outcome %q is neither %q nor %q", e.Seq, StreamClosed, p.Outcome, StreamCompleted, StreamRewound)
	}
	return nil
}
