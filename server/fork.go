package server

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// forkRequest is the body of POST /v1/tasks/{id}/fork and /reset.
type forkRequest struct {
	// At is the step position to fork at; required.
	At             *int            `json:"at"`
	Output         json.RawMessage `json:"output,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Compensate and Reason are reset's.
	Compensate bool   `json:"compensate,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// forksResponse is GET /v1/tasks/{id}/forks.
type forksResponse struct {
	Forks []history.Fork `json:"forks"`
}

func (s *Server) forkTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.fork(w, r, c, false)
}

func (s *Server) resetTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.fork(w, r, c, true)
}

// fork forks the task (sdk.Client.Fork), or resets it (Reset), and
// answers 201 with the new task, its Location.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, c *call, reset bool) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	var req forkRequest
	// The body carries up to two payloads: the output and the input.
	if p := decodeBody(w, r, 2*int64(s.cfg.MaxPayloadBytes)+web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if req.At == nil {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "at is required: the step position to fork at (0 or more)"))
		return
	}
	if !reset && (req.Compensate || req.Reason != "") {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "compensate and reason are reset's; a fork leaves the original as it is"))
		return
	}
	for _, v := range []struct {
		what string
		raw  json.RawMessage
	}{{"output", req.Output}, {"input", req.Input}} {
		if len(v.raw) > s.cfg.MaxPayloadBytes {
			s.writeError(w, r, &sdk.PayloadTooLargeError{What: v.what, Size: len(v.raw), Limit: s.cfg.MaxPayloadBytes})
			return
		}
	}
	opts := sdk.ForkOpts{At: *req.At, Output: req.Output, Input: req.Input, IdempotencyKey: req.IdempotencyKey}
	var err error
	forkID := id
	if reset {
		forkID, err = c.client.Reset(r.Context(), id, sdk.ResetOpts{ForkOpts: opts, Compensate: req.Compensate, Reason: req.Reason})
	} else {
		forkID, err = c.client.Fork(r.Context(), id, opts)
	}
	if err != nil {
		if reset && forkID != uuid.Nil {
			s.writeResetError(w, r, forkID, err)
			return
		}
		s.writeError(w, r, err)
		return
	}
	info, err := c.client.Get(r.Context(), forkID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", s.path("/v1/tasks/"+forkID.String()))
	writeJSON(w, http.StatusCreated, info)
}

// writeResetError answers a reset that wrote fork but failed to end the
// original (err): err's problem, or an internal one, naming the fork
// (fork_task_id, Location), which a retry without a key would make again.
func (s *Server) writeResetError(w http.ResponseWriter, r *http.Request, fork uuid.UUID, err error) {
	p := web.ProblemFor(err)
	if p == nil {
		s.log.Error("request failed", "method", r.Method, "path", logPath(r), slog.String("error", err.Error()))
		p = web.NewProblem(http.StatusInternalServerError, web.CodeInternal, "")
	}
	p.ForkTaskID = fork.String()
	note := "the fork " + fork.String() + " was written, but ending the original failed: retry with the fork's idempotency key, or cancel the original"
	if p.Detail == "" {
		p.Detail = note
	} else {
		p.Detail = note + ": " + p.Detail
	}
	w.Header().Set("Location", s.path("/v1/tasks/"+fork.String()))
	s.writeProblem(w, r, p)
}

// taskForks answers the tasks forked from the task, in the order they
// were made.
func (s *Server) taskForks(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	forks, err := c.client.Forks(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if forks == nil {
		forks = []history.Fork{}
	}
	writeJSON(w, http.StatusOK, forksResponse{Forks: forks})
}
