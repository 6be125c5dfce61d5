package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// taskUsage is GET /v1/tasks/{id}/usage: what the task's steps reported
// (sdk.Client.TaskUsage), with ?children=true its descendants rolled up.
func (s *Server) taskUsage(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	var opts sdk.TaskUsageOpts
	if v := r.URL.Query().Get("children"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "children "+strconv.Quote(v)+" is not true or false"))
			return
		}
		opts.Children = b
	}
	u, err := c.client.TaskUsage(r.Context(), id, &opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// usageSeriesView is GET /v1/usage's answer: the series with its step in
// seconds.
type usageSeriesView struct {
	By          cairntype.UsageBy          `json:"by"`
	From        time.Time                  `json:"from"`
	Until       time.Time                  `json:"until"`
	StepSeconds float64                    `json:"step_seconds"`
	Keys        []cairntype.UsageSeriesKey `json:"keys"`
	Total       cairntype.UsageTotal       `json:"total"`
}

// usageSeries is GET /v1/usage: the namespace's usage over time by
// fairness key, model or type (sdk.Client.UsageSeries).
func (s *Server) usageSeries(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	bad := func(detail string) {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, detail))
	}
	by, err := cairntype.ParseUsageBy(q.Get("by"))
	if err != nil {
		bad("by " + strconv.Quote(q.Get("by")) + " is not one of fairness_key (or tenant), model or type")
		return
	}
	now := time.Now()
	query := sdk.UsageQuery{By: by}
	if v := q.Get("since"); v != "" {
		if query.Since, err = ParseAuditTime(v, now); err != nil {
			bad("since: " + err.Error())
			return
		}
	}
	if v := q.Get("until"); v != "" {
		if query.Until, err = ParseAuditTime(v, now); err != nil {
			bad("until: " + err.Error())
			return
		}
	}
	if v := q.Get("step"); v != "" {
		if query.Step, err = time.ParseDuration(v); err != nil || query.Step <= 0 {
			bad("step " + strconv.Quote(v) + " is not a duration such as \"1h\"")
			return
		}
	}
	series, err := c.client.UsageSeries(r.Context(), query)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, usageSeriesView{By: series.By, From: series.From, Until: series.Until,
		StepSeconds: series.Step.Seconds(), Keys: series.Keys, Total: series.Total})
}
