package history

import (
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"
)

// eventJSON is an event's wire form: the payload in its versioned encoding
// under "data", the type beside it.
type eventJSON struct {
	Seq     int64           `json:"seq"`
	Type    Type            `json:"type"`
	At      time.Time       `json:"at"`
	Attempt int             `json:"attempt,omitempty"`
	Data    json.RawMessage `json:"data"`
}

// MarshalJSON encodes e as {"seq", "type", "at", "attempt", "data"}, data
// being the payload's versioned encoding ([Encode]): the form the CLI and
// the HTTP API show a history in.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Data == nil {
		return nil, errors.Newf("encode event %d: no payload", e.Seq)
	}
	data, err := Encode(e.Data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventJSON{Seq: e.Seq, Type: e.Data.EventType(), At: e.At, Attempt: e.Attempt, Data: data})
}

// UnmarshalJSON decodes the form MarshalJSON writes, payload included
// ([Decode]); a malformed event is an error marked [ErrInvalidHistory].
func (e *Event) UnmarshalJSON(b []byte) error {
	var w eventJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidf(err, "decode event")
	}
	data, err := Decode(w.Type, w.Data)
	if err != nil {
		return err
	}
	*e = Event{Seq: w.Seq, At: w.At, Attempt: w.Attempt, Data: data}
	return nil
}
