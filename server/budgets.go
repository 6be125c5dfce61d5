package server

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// Budgets over HTTP (issue 38): the namespace's scope budgets with their
// current windows, set and removed by an admin, raised by an operator.
// Durations are in seconds, as the namespace's settings are.

// budgetView is a scope budget with its current window (GET /v1/budgets,
// PUT /v1/budgets/{ref}).
type budgetView struct {
	Ref                string    `json:"ref"`
	FairnessKey        string    `json:"fairness_key,omitempty"`
	Type               string    `json:"type,omitempty"`
	USD                float64   `json:"usd"`
	Tokens             int64     `json:"tokens"`
	WindowSeconds      int64     `json:"window_seconds"`
	OnExhausted        string    `json:"on_exhausted"`
	WaitTimeoutSeconds float64   `json:"wait_timeout_seconds,omitempty"`
	WindowStart        time.Time `json:"window_start"`
	SpentUSD           float64   `json:"spent_usd"`
	SpentTokens        int64     `json:"spent_tokens"`
	ReservedUSD        float64   `json:"reserved_usd"`
	ReservedTokens     int64     `json:"reserved_tokens"`
	RaisedUSD          float64   `json:"raised_usd"`
	RaisedTokens       int64     `json:"raised_tokens"`
	UpdatedAt          time.Time `json:"updated_at"`
}

func viewBudget(b sdk.BudgetInfo) budgetView {
	action := history.BudgetAction(string(b.Budget.OnExhausted))
	return budgetView{Ref: b.Ref, FairnessKey: b.Scope.FairnessKey, Type: b.Scope.Type, USD: b.Budget.USD, Tokens: b.Budget.Tokens,
		WindowSeconds: int64(b.Budget.Window / time.Second), OnExhausted: action, WaitTimeoutSeconds: b.Budget.WaitTimeout.Seconds(),
		WindowStart: b.WindowStart.UTC(), SpentUSD: b.SpentUSD, SpentTokens: b.SpentTokens, ReservedUSD: b.ReservedUSD,
		ReservedTokens: b.ReservedTokens, RaisedUSD: b.RaisedUSD, RaisedTokens: b.RaisedTokens, UpdatedAt: b.UpdatedAt.UTC()}
}

// budgetRequest is the body of PUT /v1/budgets/{ref}.
type budgetRequest struct {
	USD                float64 `json:"usd"`
	Tokens             int64   `json:"tokens"`
	WindowSeconds      int64   `json:"window_seconds"`
	OnExhausted        string  `json:"on_exhausted"`
	WaitTimeoutSeconds float64 `json:"wait_timeout_seconds"`
}

// taskBudgetRequest is a start's budget (POST /v1/tasks): over the task's
// life, so without a window.
type taskBudgetRequest struct {
	USD                float64 `json:"usd"`
	Tokens             int64   `json:"tokens"`
	OnExhausted        string  `json:"on_exhausted"`
	WaitTimeoutSeconds float64 `json:"wait_timeout_seconds"`
}

// budget is the request as the SDK takes it, its wait timeout checked.
func (req *taskBudgetRequest) budget() (*sdk.Budget, *Problem) {
	timeout, p := waitTimeout("budget.wait_timeout_seconds", req.WaitTimeoutSeconds)
	if p != nil {
		return nil, p
	}
	return &sdk.Budget{USD: req.USD, Tokens: req.Tokens, OnExhausted: sdk.BudgetAction(req.OnExhausted), WaitTimeout: timeout}, nil
}

// waitTimeout is a wait timeout in seconds as a duration, to the
// millisecond; the SDK checks its range.
func waitTimeout(name string, v float64) (time.Duration, *Problem) {
	if math.IsNaN(v) || v < 0 || v > float64(366*24*3600) {
		return 0, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			name+" "+strconv.FormatFloat(v, 'g', -1, 64)+" is not a number of seconds between 0 (the default, 24 hours) and 31622400 (366 days)")
	}
	return time.Duration(math.Round(v*1000)) * time.Millisecond, nil
}

// budgetScope reads the {ref} of a scope budget: "namespace",
// "fairness_key:<key>" or "type:<name>" (URL-escaped in the path).
func budgetScope(ref string) (sdk.BudgetScope, *Problem) {
	if err := history.ValidBudgetRef(ref); err != nil {
		return sdk.BudgetScope{}, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, err.Error())
	}
	if k, ok := strings.CutPrefix(ref, history.BudgetRefKeyPrefix); ok {
		return sdk.BudgetScope{FairnessKey: k}, nil
	}
	if t, ok := strings.CutPrefix(ref, history.BudgetRefTypePrefix); ok {
		return sdk.BudgetScope{Type: t}, nil
	}
	if ref != history.BudgetRefNamespace {
		return sdk.BudgetScope{}, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			"budget "+strconv.Quote(ref)+": a task's budget is set when it starts (POST /v1/tasks, budget), not here; it can be raised")
	}
	return sdk.BudgetScope{}, nil
}

func (s *Server) listBudgets(w http.ResponseWriter, r *http.Request, c *call) {
	budgets, err := c.client.Budgets(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]budgetView, len(budgets))
	for i, b := range budgets {
		out[i] = viewBudget(b)
	}
	writeJSON(w, http.StatusOK, map[string]any{"budgets": out})
}

// putBudget sets a scope budget; workers apply it within a second.
func (s *Server) putBudget(w http.ResponseWriter, r *http.Request, c *call) {
	scope, p := budgetScope(r.PathValue("ref"))
	if p != nil {
		s.writeProblem(w, r, p)
		return
	}
	var req budgetRequest
	if p := decodeBody(w, r, web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if req.WindowSeconds <= 0 || req.WindowSeconds > 366*24*3600 {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			"window_seconds "+strconv.FormatInt(req.WindowSeconds, 10)+" is not between 60 (a minute) and 31622400 (366 days)"))
		return
	}
	timeout, p := waitTimeout("wait_timeout_seconds", req.WaitTimeoutSeconds)
	if p != nil {
		s.writeProblem(w, r, p)
		return
	}
	b := sdk.Budget{USD: req.USD, Tokens: req.Tokens, Window: time.Duration(req.WindowSeconds) * time.Second,
		OnExhausted: sdk.BudgetAction(req.OnExhausted), WaitTimeout: timeout}
	if err := c.client.SetBudget(r.Context(), scope, b); err != nil {
		s.writeError(w, r, err)
		return
	}
	ref, _ := scope.Ref()
	budgets, err := c.client.Budgets(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for _, b := range budgets {
		if b.Ref == ref {
			writeJSON(w, http.StatusOK, viewBudget(b))
			return
		}
	}
	// Deleted between the two calls.
	s.writeProblem(w, r, web.NewProblem(http.StatusConflict, web.CodeConflict, "the budget was deleted as it was set"))
}

// deleteBudget removes a scope budget; its windows' counts stay.
func (s *Server) deleteBudget(w http.ResponseWriter, r *http.Request, c *call) {
	scope, p := budgetScope(r.PathValue("ref"))
	if p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if err := c.client.DeleteBudget(r.Context(), scope); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// raiseRequest is the body of POST /v1/budgets/{ref}/raise.
type raiseRequest struct {
	USD    float64 `json:"usd"`
	Tokens int64   `json:"tokens"`
	Reason string  `json:"reason"`
	// By is who raises it: required by a server without API tokens,
	// refused by one with them (the token's name is recorded).
	By string `json:"by"`
}

// raiseResponse answers a raise: the tasks it woke.
type raiseResponse struct {
	Ref   string      `json:"ref"`
	By    string      `json:"by"`
	Woken []uuid.UUID `json:"woken"`
}

// raiseBudget raises a budget (a scope budget's current window, or a
// task's budget) and wakes the tasks waiting on it.
func (s *Server) raiseBudget(w http.ResponseWriter, r *http.Request, c *call) {
	ref := r.PathValue("ref")
	if err := history.ValidBudgetRef(ref); err != nil {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, err.Error()))
		return
	}
	var req raiseRequest
	if p := decodeBody(w, r, web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	by := req.By
	switch {
	case c.who.Name() != "" && req.By != "":
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			"by: the raise is recorded as the token's ("+c.who.Requester()+"); leave by out"))
		return
	case c.who.Name() != "":
		by = c.who.Requester()
	case by == "":
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			"by (who raises the budget, for the ledger) is required: the server has no API tokens to tell it"))
		return
	}
	woken, err := c.client.RaiseBudget(r.Context(), ref, sdk.BudgetRaise{USD: req.USD, Tokens: req.Tokens, By: by, Reason: req.Reason})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if woken == nil {
		woken = []uuid.UUID{}
	}
	writeJSON(w, http.StatusOK, raiseResponse{Ref: ref, By: by, Woken: woken})
}
