package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cockroachdb/errors"
)

// Audit defaults: the last day, the first thousand matches; at most a
// million records per request (page through with since).
const (
	defaultAuditRange = 24 * time.Hour
	defaultAuditLimit = 1000
	maxAuditLimit     = 1_000_000
)

// auditEvents streams the events of the namespace that the CEL filter
// matches, in time order, as JSON lines (application/x-ndjson): one
// {"event": …, "task": …} per line. A failure after the first line is
// reported as a last line {"error": {...problem}}, the status being sent.
func (s *Server) auditEvents(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	now := time.Now()
	p := sdk.AuditParams{Since: now.Add(-defaultAuditRange), Limit: defaultAuditLimit}
	var err error
	if v := q.Get("since"); v != "" {
		if p.Since, err = ParseAuditTime(v, now); err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "since: "+err.Error()))
			return
		}
	}
	if v := q.Get("until"); v != "" {
		if p.Until, err = ParseAuditTime(v, now); err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "until: "+err.Error()))
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditLimit {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "limit "+strconv.Quote(v)+" is not a number from 1 to 1000000"))
			return
		}
		p.Limit = n
	}
	if v := q.Get("filter"); v != "" {
		if p.Filter, err = sdk.CompileEventFilter(v); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	until := p.Until
	if until.IsZero() {
		until = now
	}
	if !p.Since.Before(until) {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "since is not before until"))
		return
	}
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	started, written := false, 0
	err = c.client.Audit(r.Context(), p, func(rec sdk.AuditRecord) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
		if written++; written%500 == 0 {
			s.extendWrite(w, 0) // the client reads on: it may read more
			if flusher != nil {
				flusher.Flush()
			}
		}
		return nil
	})
	switch {
	case err != nil && !started:
		s.writeError(w, r, err)
	case err != nil:
		pr := web.ProblemFor(err)
		if pr == nil {
			s.log.Error("audit failed mid-stream", "path", logPath(r), "error", err.Error())
			pr = web.NewProblem(http.StatusInternalServerError, web.CodeInternal, "")
		}
		_ = enc.Encode(map[string]*Problem{"error": pr})
	case !started:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK) // no match: an empty stream
	}
}

// ParseAuditTime reads an RFC 3339 time, or a duration before now (Go's
// syntax, plus whole days: 7d): the since and until of an audit, for the
// API and the CLI alike.
func ParseAuditTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			if n > maxAuditDays {
				return time.Time{}, errors.Newf("%q is more than %dd: a duration reaches back 292 years at most; give an RFC 3339 time", v, maxAuditDays)
			}
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errBadTime(v)
}

// maxAuditDays is the most days a time.Duration holds (106751.99).
const maxAuditDays = int(math.MaxInt64 / int64(24*time.Hour))

type errBadTime string

func (e errBadTime) Error() string {
	return strconv.Quote(string(e)) + " is neither an RFC 3339 time (2026-11-01T00:00:00Z) nor a duration before now (24h, 90m, 7d)"
}
