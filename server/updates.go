package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// updateRequest is the optional body of an update: its args, and the id
// that makes a retried update idempotent.
type updateRequest struct {
	Args     json.RawMessage `json:"args,omitempty"`
	UpdateID string          `json:"update_id,omitempty"`
}

// updateResponse answers an update: its outcome (status "completed" with
// the handler's output) or, when the wait ran out first, status
// "pending" (202, with a Location to poll).
type updateResponse struct {
	TaskID    uuid.UUID       `json:"task_id"`
	UpdateID  string          `json:"update_id"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output,omitempty"`
	Duplicate bool            `json:"duplicate,omitempty"`
}

// An update's call waits 30 s for the outcome unless told otherwise
// (?timeout=), and never more than a minute.
const (
	defaultUpdateWait = 30 * time.Second
	maxUpdateWait     = time.Minute
)

// updateTask is POST /v1/tasks/{id}/updates/{name}: validated (422
// update_rejected, 404 update_not_found, nothing written), recorded, and
// answered with the handler's outcome (200, or 422 update_failed), or 202
// with a Location to poll when the timeout passes first.
func (s *Server) updateTask(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	timeout, ok := s.updateTimeout(w, r)
	if !ok {
		return
	}
	var req updateRequest
	if p := decodeBody(w, r, int64(s.cfg.MaxPayloadBytes)+web.EnvelopeBytes, &req, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	var args json.RawMessage
	if len(req.Args) > 0 {
		args = req.Args // nil, not an empty RawMessage, when there are none
	}
	res, err := c.client.SubmitUpdate(r.Context(), id, r.PathValue("name"), args, &sdk.UpdateOpts{UpdateID: req.UpdateID})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitUpdate(w, r, c, res.TaskID, r.PathValue("name"), res.UpdateID, res.Duplicate, timeout)
}

// updateOutcome is GET /v1/tasks/{id}/updates/{name}/{update_id}: the
// outcome of the update (of that name), waited for up to ?timeout=
// (default 30 s, at most 1 min).
func (s *Server) updateOutcome(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	timeout, ok := s.updateTimeout(w, r)
	if !ok {
		return
	}
	s.awaitUpdate(w, r, c, id, r.PathValue("name"), r.PathValue("update_id"), false, timeout)
}

func (s *Server) updateTimeout(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v := r.URL.Query().Get("timeout")
	if v == "" {
		return defaultUpdateWait, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxUpdateWait {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "timeout "+strconv.Quote(v)+" is not a duration between 0s and 1m"))
		return 0, false
	}
	return d, true
}

// awaitUpdate waits up to timeout for the outcome of update updateID of
// task id and answers it. It holds one of the server's long polls.
func (s *Server) awaitUpdate(w http.ResponseWriter, r *http.Request, c *call, id uuid.UUID, name, updateID string, duplicate bool, timeout time.Duration) {
	if !s.holdLongPoll() {
		w.Header().Set("Location", updateLocation(id, name, updateID))
		s.writeProblem(w, r, s.longPollsFull("poll the update's outcome shortly"))
		return
	}
	defer s.longPolls.Add(-1)
	s.extendWrite(w, timeout)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	go func() {
		select {
		case <-s.drained: // shutting down: answer now
			cancel()
		case <-ctx.Done():
		}
	}()
	out, err := c.client.UpdateOutcome(ctx, id, updateID)
	if out != nil && out.Name != name {
		// Another update's id: not this name's.
		out, err = nil, errors.Mark(errors.Newf("task %s has no update %q called %q", id, updateID, name), sdk.ErrNotFound)
	}
	switch {
	case errors.Is(err, sdk.ErrUpdatePending) && r.Context().Err() == nil:
		w.Header().Set("Location", updateLocation(id, name, updateID))
		writeJSON(w, http.StatusAccepted, updateResponse{TaskID: id, UpdateID: updateID, Status: "pending", Duplicate: duplicate})
	case err != nil:
		s.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, updateResponse{TaskID: id, UpdateID: updateID, Status: "completed", Output: out.Output, Duplicate: duplicate})
	}
}

func updateLocation(id uuid.UUID, name, updateID string) string {
	return "/v1/tasks/" + id.String() + "/updates/" + url.PathEscape(name) + "/" + url.PathEscape(updateID)
}
