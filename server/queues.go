package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/server/internal/web"
)

// queueView is a queue in GET /v1/queues, durations in seconds.
type queueView struct {
	Queue            string  `json:"queue"`
	Waiting          int     `json:"waiting"`
	Due              int     `json:"due"`
	Running          int     `json:"running"`
	OldestDueSeconds float64 `json:"oldest_due_age_seconds"`
	Completed        int     `json:"completed"`
	Failed           int     `json:"failed"`
	AttemptsFailed   int     `json:"attempts_failed"`
	Throughput       float64 `json:"throughput_per_second"`
	ErrorRate        float64 `json:"error_rate"`
	WindowSeconds    float64 `json:"window_seconds"`
	MaxWaiting       int     `json:"max_waiting,omitempty"`
	Concurrency      int     `json:"concurrency,omitempty"`
}

func newQueueView(q cairntype.QueueStats) queueView {
	return queueView{
		Queue: q.Queue, Waiting: q.Waiting, Due: q.Due, Running: q.Running, OldestDueSeconds: q.OldestDueAge.Seconds(),
		Completed: q.Completed, Failed: q.Failed, AttemptsFailed: q.AttemptsFailed, Throughput: q.Throughput(),
		ErrorRate: q.ErrorRate(), WindowSeconds: q.Window.Seconds(), MaxWaiting: q.MaxWaiting, Concurrency: q.Concurrency,
	}
}

// The window of GET /v1/queues: five minutes unless told, at most a day.
const (
	defaultQueueWindow = 5 * time.Minute
	maxQueueWindow     = 24 * time.Hour
)

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request, c *call) {
	window := defaultQueueWindow
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxQueueWindow {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "window "+strconv.Quote(v)+" is not a duration between 1s and 24h"))
			return
		}
		window = d
	}
	stats, err := c.client.QueueStats(r.Context(), window)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]queueView, len(stats))
	for i, q := range stats {
		out[i] = newQueueView(q)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// The window of a diagnosis unless the request gives one.
const defaultDiagnoseWindow = 15 * time.Minute

// diagnoseQueue answers "why is this queue growing?" (cairntype.QueueDiagnosis).
func (s *Server) diagnoseQueue(w http.ResponseWriter, r *http.Request, c *call) {
	window := defaultDiagnoseWindow
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "window "+strconv.Quote(v)+" is not a duration such as \"15m\""))
			return
		}
		window = d
	}
	d, err := c.client.DiagnoseQueue(r.Context(), r.PathValue("queue"), window)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// taskTypeView is a registered type in GET /v1/task-types.
type taskTypeView struct {
	Type                   string    `json:"type"`
	Version                int       `json:"version"`
	Queue                  string    `json:"queue"`
	MaxAttempts            int       `json:"max_attempts"`
	ScheduleToCloseSeconds float64   `json:"schedule_to_close_seconds,omitempty"`
	RegisteredBy           string    `json:"registered_by"`
	RegisteredAt           time.Time `json:"registered_at"`
	// Signals is what the type declares; absent when nothing, {} when
	// it takes none (a nil map would be left out as well as an empty one).
	Signals *map[string]json.RawMessage `json:"signals,omitempty"`
}

func (s *Server) listTaskTypes(w http.ResponseWriter, r *http.Request, c *call) {
	types, err := c.client.TaskTypes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]taskTypeView, len(types))
	for i, t := range types {
		out[i] = taskTypeView{Type: t.Type, Version: t.Version, Queue: t.Queue, MaxAttempts: t.MaxAttempts,
			ScheduleToCloseSeconds: t.ScheduleToClose.Seconds(), RegisteredBy: t.RegisteredBy, RegisteredAt: t.RegisteredAt}
		if t.Signals != nil {
			out[i].Signals = &types[i].Signals
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_types": out})
}
