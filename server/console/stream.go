package console

import (
	"bufio"
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// maxConsoleStreams bounds the task pages streaming at once (each holds a
// connection and a reader): past it a page falls back to its refresh.
const maxConsoleStreams = 200

// consoleTaskStream is what a task's page listens to (static/stream.js):
// the task's streams and its history's events as Server-Sent Events, as
// the API's GET /v1/tasks/{id}/stream sends them with events=true, under
// the console's session.
func (s *Console) consoleTaskStream(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "not a task id"))
		return
	}
	from, _, _, ok := web.SSEFrom(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from"))
	if !ok {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "not a stream entry's seq"))
		return
	}
	if _, err := c.client.Get(r.Context(), id); err != nil {
		p := web.ProblemFor(err)
		if p == nil {
			p = web.NewProblem(http.StatusInternalServerError, web.CodeInternal, "internal error")
		}
		s.writeProblem(w, r, p)
		return
	}
	if s.streams.Add(1) > maxConsoleStreams {
		s.streams.Add(-1)
		p := web.NewProblem(http.StatusTooManyRequests, web.CodeTooManyWaits, "the console streams its limit of task pages; the page refreshes instead")
		web.RetryAfter(p, 10*time.Second)
		s.writeProblem(w, r, p)
		return
	}
	defer s.streams.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := bufio.NewWriterSize(w, 32<<10)
	_ = rc.SetWriteDeadline(time.Now().Add(2 * web.SSEHeartbeat))
	_, _ = buf.WriteString("retry: 2000\n\n")
	for it, err := range c.client.Stream(ctx, id, from, &sdk.StreamOpts{Events: true, Heartbeat: web.SSEHeartbeat}) {
		if err != nil {
			return
		}
		web.WriteSSE(buf, it)
		if buf.Flush() != nil || rc.Flush() != nil {
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(2 * web.SSEHeartbeat))
	}
}
