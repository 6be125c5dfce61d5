package historytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// EncodedEvent is an event as the events table stores it: the payload in its
// versioned encoding ([history.Encode]) next to the columns seq, type, at and
// attempt. Golden files and fuzz corpora are JSON arrays of these.
type EncodedEvent struct {
	Seq     int64           `json:"seq"`
	Type    history.Type    `json:"type"`
	At      time.Time       `json:"at"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
}

// EncodeEvents returns events as a JSON array of [EncodedEvent] in the form
// [FormatEncoded] writes.
func EncodeEvents(events []history.Event) ([]byte, error) {
	encoded := make([]EncodedEvent, len(events))
	for i, e := range events {
		data, err := history.Encode(e.Data)
		if err != nil {
			return nil, errors.Wrapf(err, "event %d", e.Seq)
		}
		encoded[i] = EncodedEvent{Seq: e.Seq, Type: e.Type(), At: e.At, Attempt: e.Attempt, Data: data}
	}
	return FormatEncoded(encoded)
}

// FormatEncoded returns encoded as a JSON array, one event per line so that
// golden files diff well. Tests use it to write events no valid writer would.
func FormatEncoded(encoded []EncodedEvent) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("[")
	for i, ee := range encoded {
		line, err := json.Marshal(ee)
		if err != nil {
			return nil, errors.Wrapf(err, "event %d", ee.Seq)
		}
		if i > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n  ")
		buf.Write(line)
	}
	buf.WriteString("\n]\n")
	return buf.Bytes(), nil
}

// DecodeEvents parses a JSON array of [EncodedEvent], decoding each payload
// with [history.Decode]. Every error it returns is marked
// [history.ErrInvalidHistory]: input that does not decode cannot be a
// history. Unknown fields are refused.
func DecodeEvents(data []byte) ([]history.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var encoded []EncodedEvent
	if err := dec.Decode(&encoded); err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "decode events"), history.ErrInvalidHistory)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errmark.Mark(errors.New("decode events: trailing data"), history.ErrInvalidHistory)
	}
	events := make([]history.Event, len(encoded))
	for i, ee := range encoded {
		p, err := history.Decode(ee.Type, ee.Data)
		if err != nil {
			return nil, errmark.Mark(errors.Wrapf(err, "decode event %d", ee.Seq), history.ErrInvalidHistory)
		}
		events[i] = history.Event{Seq: ee.Seq, At: ee.At, Attempt: ee.Attempt, Data: p}
	}
	return events, nil
}

// Dump renders events one per line (seq, time, attempt, type and encoded
// payload), for the log of a failing test.
func Dump(events []history.Event) string {
	var b strings.Builder
	for _, e := range events {
		typ, data := "<nil>", ""
		if e.Data != nil {
			if enc, err := history.Encode(e.Data); err != nil {
				typ, data = fmt.Sprintf("%T", e.Data), fmt.Sprintf("<%v>", err)
			} else {
				typ, data = string(e.Type()), string(enc)
			}
		}
		fmt.Fprintf(&b, "%4d %s attempt=%d %-18s %s\n", e.Seq, e.At.Format(time.RFC3339Nano), e.Attempt, typ, data)
	}
	return b.String()
}
