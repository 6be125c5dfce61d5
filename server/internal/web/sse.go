package web

import (
	"bufio"
	"encoding/json"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/sdk"
)

// SSEHeartbeat is how often a stream of Server-Sent Events (the API's
// and the console's) sends a comment while nothing else comes, so proxies
// keep the connection open and a client notices a dead one.
const SSEHeartbeat = 15 * time.Second

// SSEEntry is the data of a chunk, rewind or end event.
type SSEEntry struct {
	Seq      int64           `json:"seq"`
	Stream   string          `json:"stream"`
	Attempt  int             `json:"attempt"`
	Position int             `json:"position"`
	Data     json.RawMessage `json:"data,omitempty"`
	Time     time.Time       `json:"time"`
}

// SSEStatus is the data of a status event.
type SSEStatus struct {
	Status   string `json:"status"`
	Finished bool   `json:"finished"`
}

// WriteSSE writes a stream's item as a Server-Sent Event: chunk, rewind
// and end with their seq as id, status, event, and a comment for idle.
func WriteSSE(buf *bufio.Writer, it sdk.StreamItem) {
	var data any
	switch it.Kind {
	case sdk.StreamIdle:
		_, _ = buf.WriteString(": keep-alive\n\n")
		return
	case sdk.StreamStatus:
		data = SSEStatus{Status: string(it.Status), Finished: it.Status.Terminal()}
	case sdk.StreamEvent:
		data = it.Event
	default:
		data = SSEEntry{Seq: it.Seq, Stream: it.Stream, Attempt: it.Attempt, Position: it.Position, Data: it.Data, Time: it.Time}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return
	}
	if it.Seq > 0 {
		_, _ = buf.WriteString("id: " + strconv.FormatInt(it.Seq, 10) + "\n")
	}
	_, _ = buf.WriteString("event: " + string(it.Kind) + "\ndata: ")
	_, _ = buf.Write(b) // JSON holds no newline
	_, _ = buf.WriteString("\n\n")
}

// SSEFrom reads where a stream resumes: the Last-Event-ID header, else
// the from parameter; name says which one v came from, for an error.
func SSEFrom(lastEventID, from string) (after int64, name, v string, ok bool) {
	name, v = "Last-Event-ID", lastEventID
	if v == "" {
		name, v = "from", from
	}
	if v == "" {
		return 0, name, v, true
	}
	after, err := strconv.ParseInt(v, 10, 64)
	if err != nil || after < 0 {
		return 0, name, v, false
	}
	return after, name, v, true
}
