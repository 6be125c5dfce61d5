package server

import (
	"net/http"
	"time"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// modelLimitView is a model's rate limit (GET /v1/model-limits, PUT
// /v1/model-limits/{model}).
type modelLimitView struct {
	Model             string    `json:"model"`
	TokensPerMinute   int64     `json:"tokens_per_minute"`
	RequestsPerMinute int64     `json:"requests_per_minute"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// modelLimitRequest is the body of PUT /v1/model-limits/{model}: 0 (or
// left out) leaves a rate unlimited; at least one is set.
type modelLimitRequest struct {
	TokensPerMinute   int64 `json:"tokens_per_minute"`
	RequestsPerMinute int64 `json:"requests_per_minute"`
}

func (s *Server) listModelLimits(w http.ResponseWriter, r *http.Request, c *call) {
	limits, err := c.client.ModelLimits(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]modelLimitView, len(limits))
	for i, l := range limits {
		out[i] = modelLimitView{Model: l.Model, TokensPerMinute: l.TokensPerMinute, RequestsPerMinute: l.RequestsPerMinute, UpdatedAt: l.UpdatedAt.UTC()}
	}
	writeJSON(w, http.StatusOK, map[string]any{"model_limits": out})
}

// putModelLimit sets a model's limit; workers apply it within a second.
func (s *Server) putModelLimit(w http.ResponseWriter, r *http.Request, c *call) {
	var req modelLimitRequest
	if p := decodeBody(w, r, web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	model := r.PathValue("model")
	if err := c.client.SetModelLimit(r.Context(), model, sdk.ModelLimit{TokensPerMinute: req.TokensPerMinute, RequestsPerMinute: req.RequestsPerMinute}); err != nil {
		s.writeError(w, r, err)
		return
	}
	limits, err := c.client.ModelLimits(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for _, l := range limits {
		if l.Model == model {
			writeJSON(w, http.StatusOK, modelLimitView{Model: l.Model, TokensPerMinute: l.TokensPerMinute, RequestsPerMinute: l.RequestsPerMinute,
				UpdatedAt: l.UpdatedAt.UTC()})
			return
		}
	}
	// Deleted between the two calls.
	s.writeProblem(w, r, web.NewProblem(http.StatusConflict, web.CodeConflict, "the model's limit was deleted as it was set"))
}

// deleteModelLimit removes a model's limit: its waiting steps run.
func (s *Server) deleteModelLimit(w http.ResponseWriter, r *http.Request, c *call) {
	if err := c.client.DeleteModelLimit(r.Context(), r.PathValue("model")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
