package server

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
)

// Problem is an RFC 9457 problem detail, the body of every error response
// (Content-Type application/problem+json). Code is stable: clients switch
// on it, never on Title or Detail.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
	// Line and Column locate the error in a CEL expression (code
	// bad_filter), 1-based, when known.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// Exceeded names the limit a filter went over (code
	// filter_too_expensive): "evaluation cost", "cost", "time" or "rows
	// scanned" (see sdk.FilterLimitError).
	Exceeded string `json:"exceeded,omitempty"`
	// RetryAfterSeconds repeats the Retry-After header (code queue_full).
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
	// SizeBytes and LimitBytes are a payload's size and the limit it went
	// over (code payload_too_large); SizeBytes is left out when a body
	// over the limit gave no Content-Length.
	SizeBytes  int64 `json:"size_bytes,omitempty"`
	LimitBytes int64 `json:"limit_bytes,omitempty"`
	// HistoryEvents and HistoryBytes are what the task's history holds,
	// and MaxHistoryEvents or LimitBytes the bound it is at (code
	// history_full).
	HistoryEvents    int64 `json:"history_events,omitempty"`
	HistoryBytes     int64 `json:"history_bytes,omitempty"`
	MaxHistoryEvents int64 `json:"max_history_events,omitempty"`

	retryAfter time.Duration
}

// The problem codes.
const (
	codeMalformedJSON   = "malformed_json"
	codeUnknownField    = "unknown_field"
	codeInvalidRequest  = "invalid_request"
	codeUnknownTaskType = "unknown_task_type"
	codeBadFilter       = "bad_filter"
	codeFilterFailed    = "filter_failed"
	codeFilterExpensive = "filter_too_expensive"
	codeNotFound        = "not_found"
	codeTaskState       = "task_state"
	codeConflict        = "conflict"
	codePayloadTooLarge = "payload_too_large"
	codeQueueFull       = "queue_full"
	codeHistoryFull     = "history_full"
	codeUnauthorized    = "unauthorized"
	codeForbidden       = "forbidden"
	codeNotReady        = "not_ready"
	codeInternal        = "internal"
	codeTooSlow         = "diagnosis_too_slow"
	codeUnavailable     = "database_unavailable"
	codeUnsupported     = "unsupported"
	// The guard's (guard.go).
	codeHostNotAllowed   = "host_not_allowed"
	codeCrossOrigin      = "cross_origin"
	codeUnsupportedMedia = "unsupported_media_type"
	codeUnsupportedForm  = "unsupported_form_type"

	codeKeyReused   = "idempotency_key_reused"
	codeBlobCorrupt = "blob_corrupt"
	codeSealed      = "payload_sealed"
	// The callback links' (callbacks.go).
	codeCallbackUsed   = "callback_used"
	codeWaitEnded      = "wait_ended"
	codeWaitNotReached = "wait_not_reached"
	codeTooManyWaits   = "too_many_long_polls"
)

var titles = map[string]string{
	codeMalformedJSON:    "The request body is not valid JSON",
	codeUnknownField:     "The request body has a field the API does not know",
	codeInvalidRequest:   "The request is invalid",
	codeUnknownTaskType:  "No worker has registered this task type",
	codeBadFilter:        "The CEL expression does not compile",
	codeFilterFailed:     "The CEL expression failed on some events",
	codeFilterExpensive:  "The CEL expression went over the request's limits",
	codeNotFound:         "Not found",
	codeTaskState:        "The task's state does not allow this",
	codeConflict:         "The task changed concurrently; try again",
	codePayloadTooLarge:  "The task input is larger than the server accepts",
	codeQueueFull:        "The queue is full",
	codeHistoryFull:      "The task's history is at its bound and takes no more signals",
	codeUnauthorized:     "Authentication required",
	codeForbidden:        "The token does not allow this",
	codeNotReady:         "The server is not ready",
	codeInternal:         "Internal server error",
	codeTooSlow:          "The diagnosis took too long; try a shorter window",
	codeUnavailable:      "The database holding the namespace does not answer",
	codeUnsupported:      "The server's store does not support this",
	codeHostNotAllowed:   "The server does not answer requests for this host name",
	codeCrossOrigin:      "Cross-origin request refused",
	codeUnsupportedMedia: "The request body must be JSON",
	codeUnsupportedForm:  "The console's forms are URL-encoded",
	codeKeyReused:        "The idempotency key was used for another start",
	codeBlobCorrupt:      "The blob is damaged",
	codeSealed:           "The payload is encrypted and cannot be opened",
	codeCallbackUsed:     "The callback link was used already",
	codeWaitEnded:        "The wait this callback link answers has ended",
	codeWaitNotReached:   "The task does not wait at this callback link's wait yet",
	codeTooManyWaits:     "Too many long polls are open; try again later",
}

func problem(status int, code, detail string) *Problem {
	return &Problem{Type: "urn:cairn:problem:" + code, Title: titles[code], Status: status, Detail: detail, Code: code}
}

// problemFor maps an error from the sdk or engine to its problem. Errors
// it does not recognize are internal: logged in full, answered without
// detail.
func problemFor(err error) *Problem {
	var full *store.QueueFullError
	var syntax *sdk.FilterSyntaxError
	var limit *sdk.FilterLimitError
	var tooLarge *sdk.PayloadTooLargeError
	var historyFull *store.HistoryFullError
	switch {
	case errors.As(err, &historyFull):
		// 409, not 413: the request is not too large; the task can take
		// no more, whatever is sent.
		p := problem(http.StatusConflict, codeHistoryFull, historyFull.Error())
		p.HistoryEvents, p.HistoryBytes = historyFull.Events, historyFull.Bytes
		if historyFull.MaxEvents > 0 && historyFull.Events+historyFull.Adding > historyFull.MaxEvents {
			p.MaxHistoryEvents = historyFull.MaxEvents
		} else {
			p.SizeBytes, p.LimitBytes = historyFull.AddingBytes, historyFull.MaxBytes
		}
		return p
	case errors.As(err, &tooLarge):
		p := problem(http.StatusRequestEntityTooLarge, codePayloadTooLarge, tooLarge.Error())
		p.SizeBytes, p.LimitBytes = int64(tooLarge.Size), int64(tooLarge.Limit)
		return p
	case errors.As(err, &limit):
		detail := limit.Error()
		if hint := errors.FlattenHints(err); hint != "" {
			detail += " (hint: " + hint + ")"
		}
		p := problem(http.StatusUnprocessableEntity, codeFilterExpensive, detail)
		p.Exceeded = limit.Limit
		return p
	case errors.As(err, &full):
		p := problem(http.StatusTooManyRequests, codeQueueFull, full.Error())
		p.retryAfter = full.RetryAfter
		p.RetryAfterSeconds = retryAfterSeconds(full.RetryAfter)
		return p
	case errors.As(err, &syntax):
		p := problem(http.StatusBadRequest, codeBadFilter, syntax.Error())
		p.Line, p.Column = syntax.Line, syntax.Column
		return p
	case errors.Is(err, sdk.ErrBadFilter):
		return problem(http.StatusBadRequest, codeBadFilter, err.Error())
	case errors.Is(err, sdk.ErrFilterEvaluation):
		detail := err.Error()
		if hint := errors.FlattenHints(err); hint != "" {
			detail += " (hint: " + hint + ")"
		}
		return problem(http.StatusBadRequest, codeFilterFailed, detail)
	case errors.Is(err, engine.ErrPayloadSealed):
		// Its task was erased (its key destroyed), or this server has
		// no key for it: either way it cannot be read, ever, here.
		return problem(http.StatusGone, codeSealed,
			"the payload stays encrypted: its task was erased (its key destroyed), or this server has no key for it")
	case errors.Is(err, sdk.ErrBlobCorrupt):
		return problem(http.StatusInternalServerError, codeBlobCorrupt, err.Error())
	case errors.Is(err, sdk.ErrIdempotencyKeyReused):
		// Neither the task holding the key nor its state: the caller may
		// not be allowed to read it.
		return problem(http.StatusConflict, codeKeyReused,
			"the idempotency key is taken by a task of another type or input: a new start needs a new key")
	case errors.Is(err, sdk.ErrUnknownType):
		return problem(http.StatusBadRequest, codeUnknownTaskType, err.Error())
	case errors.Is(err, sdk.ErrInvalid):
		return problem(http.StatusBadRequest, codeInvalidRequest, err.Error())
	case errors.Is(err, sdk.ErrNotFound):
		return problem(http.StatusNotFound, codeNotFound, "no such task")
	case errors.Is(err, sdk.ErrTaskState):
		return problem(http.StatusConflict, codeTaskState, err.Error())
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrRetryable):
		return problem(http.StatusConflict, codeConflict, err.Error())
	case errors.Is(err, store.ErrDiagnosisTooSlow):
		return problem(http.StatusServiceUnavailable, codeTooSlow, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		// Not the driver's text: it names hosts. With cells, only the
		// namespaces of the cell that is down answer this.
		p := problem(http.StatusServiceUnavailable, codeUnavailable, "the database holding this namespace is out of reach; try again")
		p.retryAfter = time.Second
		p.RetryAfterSeconds = 1
		return p
	case errors.Is(err, store.ErrUnsupported):
		return problem(http.StatusNotImplemented, codeUnsupported, err.Error())
	}
	return nil
}

// retryAfterSeconds rounds a hint up to whole seconds, as Retry-After
// carries them, and at least one.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// writeProblem sends p, its instance the request's path as the client sent
// it (under Config.Prefix).
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	p.Instance = s.path(r.URL.Path)
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfterSeconds))
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cairn"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeError answers err: as its problem if it has one, else as an internal
// error, logged with the request.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if p := problemFor(err); p != nil {
		if p.Code == codeUnavailable {
			// The answer hides the hosts; the log keeps them for the
			// operator.
			s.log.Warn("database unavailable", "method", r.Method, "path", logPath(r), slog.String("error", err.Error()))
		}
		s.writeProblem(w, r, p)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away: nobody to answer
	}
	s.log.Error("request failed", "method", r.Method, "path", logPath(r), slog.String("error", err.Error()))
	s.writeProblem(w, r, problem(http.StatusInternalServerError, codeInternal, ""))
}

// logPath is r's path as logs may keep it: a callback's token, a bearer
// capability valid until its wait ends, is left out (a delivery that
// fails with a 5xx is logged while the link still works).
func logPath(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/v1/callbacks/") {
		return "/v1/callbacks/[redacted]"
	}
	return r.URL.Path
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
