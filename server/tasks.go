package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// startRequest is the body of POST /v1/tasks.
type startRequest struct {
	Type           string            `json:"type"`
	Version        int               `json:"version,omitempty"` // 0: the highest registered
	Input          json.RawMessage   `json:"input,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Queue          string            `json:"queue,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	RunAt          *time.Time        `json:"run_at,omitempty"`
	Delay          string            `json:"delay,omitempty"` // a Go duration: "90s", "15m"
	TraceID        string            `json:"trace_id,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	FairnessKey    string            `json:"fairness_key,omitempty"`
	FairnessWeight int               `json:"fairness_weight,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	StartDeadline  *time.Time        `json:"start_deadline,omitempty"`
	// Budget is the task's own budget, over its life and its
	// descendants'.
	Budget *taskBudgetRequest `json:"budget,omitempty"`
}

// startResponse answers a start: 202 for a new task, 200 for the task an
// idempotency key already named when the start is the same (type and
// input); another start with the key is a 409 idempotency_key_reused.
type startResponse struct {
	ID uuid.UUID `json:"id"`
	// Status is the task's; left out of a 200 to a token that may not read
	// tasks.
	Status   history.Status `json:"status,omitempty"`
	Existing bool           `json:"existing"`
}

func (s *Server) startTask(w http.ResponseWriter, r *http.Request, c *call) {
	var req startRequest
	if p := decodeBody(w, r, s.startBodyLimit(), &req, false); p != nil {
		if p.Code == web.CodePayloadTooLarge {
			p = s.startBodyTooLarge(r)
		}
		s.writeProblem(w, r, p)
		return
	}
	opts, p := req.startOpts(r.Header.Get("traceparent"))
	if p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if req.Type == "" {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "type is required"))
		return
	}
	ref, err := c.client.RegisteredType(r.Context(), req.Type, req.Version)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if len(input) > s.cfg.MaxPayloadBytes {
		// The client would keep it as a blob; over HTTP the limit holds
		// (large data is put by reference, e.g. a URL, not in a body).
		s.writeError(w, r, &sdk.PayloadTooLargeError{What: "input", Size: len(input), Limit: s.cfg.MaxPayloadBytes})
		return
	}
	res, err := c.client.StartDynamic(r.Context(), ref, input, &opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", s.path("/v1/tasks/"+res.ID.String()))
	if !res.Existing {
		writeJSON(w, http.StatusAccepted, startResponse{ID: res.ID, Status: history.StatusPending})
		return
	}
	if !c.who.Can(RoleRead) {
		// A submit-only token learns that its start was made before, not
		// how the task fares.
		writeJSON(w, http.StatusOK, startResponse{ID: res.ID, Existing: true})
		return
	}
	info, err := c.client.Get(r.Context(), res.ID)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		// The key's task was removed by retention, its key still taken:
		// the start is a duplicate of a task that is gone.
		writeJSON(w, http.StatusOK, startResponse{ID: res.ID, Existing: true})
		return
	case err != nil:
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, startResponse{ID: res.ID, Status: info.Status, Existing: true})
}

// startBodyLimit is the most bytes a start's body may hold: the input
// limit and the envelope around it.
func (s *Server) startBodyLimit() int64 { return int64(s.cfg.MaxPayloadBytes) + web.EnvelopeBytes }

// startBodyTooLarge is the problem of a start body over startBodyLimit:
// it says the input limit, which is what the caller controls.
func (s *Server) startBodyTooLarge(r *http.Request) *Problem {
	size := "over " + strconv.FormatInt(s.startBodyLimit(), 10) + " bytes"
	if r.ContentLength > 0 {
		size = strconv.FormatInt(r.ContentLength, 10) + " bytes"
	}
	p := web.NewProblem(http.StatusRequestEntityTooLarge, web.CodePayloadTooLarge, "the request body is "+size+
		"; a task's input may be at most "+strconv.Itoa(s.cfg.MaxPayloadBytes)+" bytes of JSON (MaxPayloadBytes), the rest of the body "+
		strconv.Itoa(web.EnvelopeBytes)+" bytes: pass large data by reference (a URL or an object key)")
	p.SizeBytes, p.LimitBytes = max(r.ContentLength, 0), int64(s.cfg.MaxPayloadBytes)
	return p
}

// traceparentRE is a W3C trace context traceparent header.
var traceparentRE = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// startOpts checks what the sdk does not (delay, run time and the trace
// header) and builds the start options.
func (req *startRequest) startOpts(traceparent string) (sdk.StartOpts, *Problem) {
	invalid := func(detail string) (sdk.StartOpts, *Problem) {
		return sdk.StartOpts{}, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, detail)
	}
	opts := sdk.StartOpts{
		IdempotencyKey: req.IdempotencyKey, Queue: req.Queue, Priority: req.Priority, TraceID: req.TraceID,
		Labels: req.Labels, FairnessKey: req.FairnessKey, FairnessWeight: req.FairnessWeight, MaxAttempts: req.MaxAttempts,
	}
	if req.Delay != "" {
		if req.RunAt != nil {
			return invalid("give run_at or delay, not both")
		}
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 {
			return invalid("delay " + strconv.Quote(req.Delay) + " is not a non-negative duration such as \"90s\" or \"15m\"")
		}
		opts.Delay = d
	}
	if req.RunAt != nil {
		opts.RunAt = *req.RunAt
	}
	if req.Deadline != nil {
		opts.Deadline = *req.Deadline
	}
	if req.StartDeadline != nil {
		opts.StartDeadline = *req.StartDeadline
	}
	if req.Budget != nil {
		b, p := req.Budget.budget()
		if p != nil {
			return sdk.StartOpts{}, p
		}
		opts.Budget = b
	}
	if traceparent != "" && opts.TraceID == "" {
		if !traceparentRE.MatchString(traceparent) {
			return invalid("the traceparent header " + strconv.Quote(traceparent) + " is not a W3C trace context traceparent")
		}
		opts.TraceID = traceparent
	}
	return opts, nil
}

// decodeBody decodes r's JSON body into v: at most limit bytes, no unknown
// fields (names are case-sensitive), no member named twice, strings of
// valid UTF-8 without lone surrogates, nothing after the value. An empty
// body is allowed when emptyOK.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) *Problem {
	body := http.MaxBytesReader(w, r.Body, limit)
	raw, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return web.NewProblem(http.StatusRequestEntityTooLarge, web.CodePayloadTooLarge,
				"the request body is over "+strconv.FormatInt(limit, 10)+" bytes: pass large data by reference")
		}
		return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, "the request body could not be read")
	}
	if len(raw) == 0 && emptyOK {
		return nil
	}
	return decodeJSON(raw, v)
}

// decodeJSON decodes raw into v strictly and says what was wrong: valid
// JSON that [strictJSON] refuses is refused before it is decoded; what is
// not valid JSON, encoding/json describes.
func decodeJSON(raw []byte, v any) *Problem {
	if json.Valid(raw) {
		if p := strictJSON(raw, v); p != nil {
			return p
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Anything but white space after the value is refused (More does
		// not see a stray ']' or '}').
		if len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
			return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, "the request body holds more than one JSON value")
		}
		return nil
	}
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &syntax):
		return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, "invalid JSON at byte "+strconv.FormatInt(syntax.Offset, 10)+": "+syntax.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, "the request body is empty or cut short")
	case errors.As(err, &typeErr):
		return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "field "+typeErr.Field+": expected "+typeErr.Type.String()+", got JSON "+typeErr.Value)
	case errors.As(err, &timeErr):
		return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "a time is not RFC 3339 (2026-11-29T12:00:00Z): "+timeErr.Error())
	}
	if field, ok := unknownField(err); ok {
		return web.NewProblem(http.StatusBadRequest, web.CodeUnknownField, "unknown field "+field)
	}
	return web.NewProblem(http.StatusBadRequest, web.CodeMalformedJSON, err.Error())
}

// unknownField recognizes encoding/json's error for a field
// DisallowUnknownFields refused (it has no type of its own).
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):], true
	}
	return "", false
}

func (s *Server) taskID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "task id "+strconv.Quote(r.PathValue("id"))+" is not a UUID"))
		return uuid.Nil, false
	}
	return id, true
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	info, err := c.client.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// historyPageBytes bounds the event data of each page a history is
// streamed by: what one request holds at a time (with its encoding).
const historyPageBytes = 1 << 20

// taskHistory answers {"events":[…],"id":…}, as one JSON document,
// streamed: the history is read a page at a time (sdk.RawHistoryPages)
// and each page written and flushed before the next is read, so a long
// history costs a page of memory, not its size. A failure before the
// first byte is a problem; after it, the connection is cut, so the
// client sees a truncated document, never a complete wrong one.
func (s *Server) taskHistory(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	var buf *bufio.Writer
	rc := http.NewResponseController(w)
	first := true
	err := c.client.RawHistoryPages(r.Context(), id, historyPageBytes, func(events []history.Event) error {
		if buf == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			buf = bufio.NewWriterSize(w, 64<<10)
			_, _ = buf.WriteString(`{"events":[`)
		} else {
			s.extendWrite(w, 0) // the client reads on: it may read more
		}
		for _, e := range events {
			if !first {
				_ = buf.WriteByte(',')
			}
			first = false
			data, err := json.Marshal(e)
			if err != nil {
				return err
			}
			if _, err := buf.Write(data); err != nil {
				return err
			}
		}
		if err := buf.Flush(); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		return nil
	})
	switch {
	case err != nil && buf == nil:
		s.writeError(w, r, err)
		return
	case err != nil:
		s.abortStream(r, err)
	}
	idJSON, _ := json.Marshal(id)
	_, _ = buf.WriteString(`],"id":`)
	_, _ = buf.Write(idJSON)
	_, _ = buf.WriteString("}\n")
	s.extendWrite(w, 0)
	_ = buf.Flush()
}

// abortStream ends a streamed answer that failed after its first byte:
// the connection is cut (http.ErrAbortHandler), so the client cannot take
// what it got for the whole answer.
func (s *Server) abortStream(r *http.Request, err error) {
	if r.Context().Err() == nil {
		s.log.Warn("streamed answer cut", "method", r.Method, "path", r.URL.Path, "error", err.Error())
	}
	panic(http.ErrAbortHandler)
}

// Long polls wait 30 s unless told otherwise, and never more than 5 min.
const (
	defaultWait = 30 * time.Second
	maxWait     = 5 * time.Minute
)

// waitTask answers once the task is finished, or when the timeout passes
// with the task as it is then (200 either way: the status says which).
// Past Config.MaxLongPolls open at once it answers 429 at once.
func (s *Server) waitTask(w http.ResponseWriter, r *http.Request, c *call) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	timeout := defaultWait
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxWait {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "timeout "+strconv.Quote(v)+" is not a duration between 0s and 5m"))
			return
		}
		timeout = d
	}
	if !s.holdLongPoll() {
		s.writeProblem(w, r, s.longPollsFull("try again shortly"))
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
	info, err := c.client.Wait(ctx, id)
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		// Timed out: the task (the chain's current run, when it
		// continued as new) as it is.
		if info != nil {
			id = info.ID
		}
		info, err = c.client.Get(r.Context(), id)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// holdLongPoll takes one of the server's long polls (Config.MaxLongPolls),
// and reports false when all are held; the caller releases it with
// s.longPolls.Add(-1).
func (s *Server) holdLongPoll() bool {
	if s.longPolls.Add(1) > int64(s.cfg.MaxLongPolls) {
		s.longPolls.Add(-1)
		return false
	}
	return true
}

// longPollsFull is the 429 of a request refused for want of a long poll,
// saying what to do.
func (s *Server) longPollsFull(advice string) *Problem {
	p := web.NewProblem(http.StatusTooManyRequests, web.CodeTooManyWaits,
		fmt.Sprintf("the server holds its limit of %d long polls open; %s", s.cfg.MaxLongPolls, advice))
	web.RetryAfter(p, time.Second)
	return p
}

// actionRequest is the optional body of cancel, retry, compensate and
// erase.
type actionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// cancelTask answers the run the cancel reached: on a chain of runs
// continued as new, its current run (which, cancelled, starts no next
// one), not the run named.
func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.actAnswering(w, r, c, c.client.Cancel, c.client.CurrentRun)
}

func (s *Server) retryTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.act(w, r, c, c.client.Retry)
}

func (s *Server) compensateTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.act(w, r, c, c.client.Compensate)
}

// eraseTask destroys a finished task's data key (Client.Erase): an
// administrator's request, as it cannot be undone.
func (s *Server) eraseTask(w http.ResponseWriter, r *http.Request, c *call) {
	s.act(w, r, c, c.client.Erase)
}

// act runs a request on a task (cancel, retry, compensate) and answers 202
// with the task as it is after.
func (s *Server) act(w http.ResponseWriter, r *http.Request, c *call, do func(context.Context, uuid.UUID, string) error) {
	s.actAnswering(w, r, c, do, c.client.Get)
}

// actAnswering is act answering with the task answer reads after.
func (s *Server) actAnswering(w http.ResponseWriter, r *http.Request, c *call, do func(context.Context, uuid.UUID, string) error,
	answer func(context.Context, uuid.UUID) (*sdk.TaskInfo, error)) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	var req actionRequest
	if p := decodeBody(w, r, web.EnvelopeBytes, &req, true); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if err := do(r.Context(), id, req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := answer(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, info)
}

// listResponse is a page of GET /v1/tasks.
type listResponse struct {
	Tasks []listedTask `json:"tasks"`
	// NextCursor fetches the next page (?cursor=); empty when no more
	// tasks were found.
	NextCursor string `json:"next_cursor,omitempty"`
	// FilterErrors counts the tasks the filter could not be evaluated on
	// (left out); FilterError says why, for the first.
	FilterErrors int    `json:"filter_errors,omitempty"`
	FilterError  string `json:"filter_error,omitempty"`
}

// listedTask is a task of a listing: a task as GET /v1/tasks/{id} has it,
// without the input and output unless the listing's include names them.
type listedTask struct {
	*sdk.TaskInfo
	Input  json.RawMessage  `json:"input,omitempty"`
	Output *json.RawMessage `json:"output,omitempty"` // null when included and the task has none
}

// Values of a listing's include parameter: the payloads it carries.
const (
	includeInput  = "input"
	includeOutput = "output"
)

// listInclude reads include (a comma-separated list, or repeated) into
// opts.
func listInclude(values []string, opts *sdk.ListOpts) *Problem {
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			switch strings.TrimSpace(name) {
			case includeInput:
				opts.IncludeInput = true
			case includeOutput:
				opts.IncludeOutput = true
			case "":
			default:
				return web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "include "+strconv.Quote(name)+
					" is not a field a listing can include: use include=input, include=output or include=input,output")
			}
		}
	}
	return nil
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	opts := sdk.ListOpts{Status: history.Status(q.Get("status")), Type: q.Get("type"), Queue: q.Get("queue"),
		MaxPayloadBytes: s.cfg.MaxListPayloadBytes}
	if p := listInclude(q["include"], &opts); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	if opts.Status != "" && !knownStatus(opts.Status) {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "status "+strconv.Quote(string(opts.Status))+" is not a task status"))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > sdk.MaxListLimit {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "limit "+strconv.Quote(v)+" is not a number from 1 to "+strconv.Itoa(sdk.MaxListLimit)))
			return
		}
		opts.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		id, err := ParseTaskCursor(v)
		if err != nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, "cursor "+strconv.Quote(v)+" is not one this API gave"))
			return
		}
		opts.Before = id
	}
	if v := q.Get("filter"); v != "" {
		f, err := sdk.CompileTaskFilter(v)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		opts.Filter = f
	}
	page, err := c.client.ListPage(r.Context(), &opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := listResponse{Tasks: make([]listedTask, len(page.Tasks)), FilterErrors: page.FilterErrors}
	for i, t := range page.Tasks {
		resp.Tasks[i] = listedTask{TaskInfo: t}
		if opts.IncludeInput {
			resp.Tasks[i].Input = t.Input
		}
		if opts.IncludeOutput {
			resp.Tasks[i].Output = &t.Output
		}
	}
	if page.FirstFilterError != nil {
		resp.FilterError = page.FirstFilterError.Error()
	}
	if page.Next != uuid.Nil {
		resp.NextCursor = TaskCursor(page.Next)
	}
	writeJSON(w, http.StatusOK, resp)
}

// TaskCursor is the next_cursor of a task listing whose next page starts
// after task next ([sdk.ListPage]'s Next); `cairn task list` prints the
// same string, so a cursor from either works in the other.
func TaskCursor(next uuid.UUID) string { return next.String() }

// ParseTaskCursor reads a cursor [TaskCursor] made, for
// [sdk.ListOpts.Before].
func ParseTaskCursor(cursor string) (uuid.UUID, error) {
	id, err := uuid.Parse(cursor)
	return id, errors.Wrap(err, "parse task cursor")
}

func knownStatus(s history.Status) bool {
	switch s {
	case history.StatusPending, history.StatusRunning, history.StatusRetrying, history.StatusCompleted,
		history.StatusFailed, history.StatusCancelled, history.StatusDeadLettered, history.StatusExpired, history.StatusContinued:
		return true
	}
	return false
}
