package server

import (
	"encoding/json"
	"net/http"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// signalRequest is the optional body of a signal: its payload, and the
// dedup id that makes a retried send idempotent.
type signalRequest struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	DedupID string          `json:"dedup_id,omitempty"`
}

// signalResponse answers a signal: the task it reached, and whether it was
// a duplicate (its dedup id was in the history already; nothing written).
type signalResponse struct {
	TaskID    uuid.UUID `json:"task_id"`
	Duplicate bool      `json:"duplicate"`
}

// signalTask is POST /v1/tasks/{id}/signals/{name}.
func (s *Server) signalTask(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	s.sendSignal(w, r, func(name string, payload json.RawMessage, opts sdk.SignalOpts) (sdk.SignalResult, error) {
		return c.client.Signal(r.Context(), id, name, payload, &opts)
	})
}

// signalTaskByKey is POST /v1/tasks/by-key/{key}/signals/{name}: the task
// started with that idempotency key in the namespace.
func (s *Server) signalTaskByKey(w http.ResponseWriter, r *http.Request, c *call) {
	key := r.PathValue("key")
	s.sendSignal(w, r, func(name string, payload json.RawMessage, opts sdk.SignalOpts) (sdk.SignalResult, error) {
		return c.client.SignalByKey(r.Context(), key, name, payload, &opts)
	})
}

// sendSignal decodes a signal's body and sends it with send: 202 when it
// was written, 200 for a duplicate; a finished task is a 409 task_state.
// The sender recorded is the caller (the requester api sets).
func (s *Server) sendSignal(w http.ResponseWriter, r *http.Request, send func(string, json.RawMessage, sdk.SignalOpts) (sdk.SignalResult, error)) {
	var req signalRequest
	if p := decodeBody(w, r, int64(s.cfg.MaxPayloadBytes)+web.EnvelopeBytes, &req, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	var payload json.RawMessage
	if len(req.Payload) > 0 {
		payload = req.Payload // nil, not an empty RawMessage, when there is none
	}
	res, err := send(r.PathValue("name"), payload, sdk.SignalOpts{DedupID: req.DedupID})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, signalResponse{TaskID: res.TaskID, Duplicate: res.Duplicate})
}
