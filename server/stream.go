package server

import (
	"bufio"
	"context"
	"net/http"
	"strconv"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// SSEHeartbeat is how often a stream of Server-Sent Events
// (GET /v1/tasks/{id}/stream) sends a comment while nothing else comes.
const SSEHeartbeat = web.SSEHeartbeat

// taskStream answers GET /v1/tasks/{id}/stream: the task's streams as
// Server-Sent Events, from the entry after Last-Event-ID (or ?from=), as
// they are written, until the task finishes (sdk.Client.Stream). Each
// chunk, rewind and end is an event of that name whose id is its seq; a
// status event (no id) comes first and at each change, the last one
// finished; with ?events=true each history event appended is an "event"
// event. A comment every SSEHeartbeat keeps the connection open. The
// stream counts as a long poll (Config.MaxLongPolls).
func (s *Server) taskStream(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	from, ok := s.streamFrom(w, r)
	if !ok {
		return
	}
	opts := &sdk.StreamOpts{Heartbeat: SSEHeartbeat}
	switch v := r.URL.Query().Get("events"); v {
	case "", "false":
	case "true":
		opts.Events = true
	default:
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "events "+strconv.Quote(v)+" is neither true nor false"))
		return
	}
	if _, err := c.client.Get(r.Context(), id); err != nil {
		s.writeError(w, r, err) // a problem, before the stream begins
		return
	}
	if !s.holdLongPoll() {
		s.writeProblem(w, r, s.longPollsFull("try again shortly"))
		return
	}
	defer s.longPolls.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.drained: // shutting down: the client reconnects elsewhere
			cancel()
		case <-ctx.Done():
		}
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := bufio.NewWriterSize(w, 32<<10)
	s.extendWrite(w, SSEHeartbeat)
	_, _ = buf.WriteString("retry: 1000\n\n")
	for it, err := range c.client.Stream(ctx, id, from, opts) {
		if err != nil {
			return // the connection ends; the client resumes from its last id
		}
		web.WriteSSE(buf, it)
		if err := buf.Flush(); err != nil {
			return
		}
		_ = rc.Flush()
		s.extendWrite(w, SSEHeartbeat)
	}
}

// streamFrom reads where a stream resumes: Last-Event-ID, else ?from=.
func (s *Server) streamFrom(w http.ResponseWriter, r *http.Request) (int64, bool) {
	from, name, v, ok := web.SSEFrom(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from"))
	if !ok {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, name+" "+strconv.Quote(v)+" is not a stream entry's seq (an integer, 0 or more)"))
	}
	return from, ok
}
