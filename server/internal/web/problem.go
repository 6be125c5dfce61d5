package web

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk"
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
	// Query and Registered are the query asked for and those the
	// workflow had registered (code query_not_found); Reason says why no
	// worker answered (code no_worker): "not_registered" or "no_answer".
	Query      string   `json:"query,omitempty"`
	Registered []string `json:"registered,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	// ForkTaskID is the fork a reset wrote before its request on the
	// original failed: the fork exists, so a retry without an idempotency
	// key would fork again.
	ForkTaskID string `json:"fork_task_id,omitempty"`
	// Declared are the signals the task's type declares (code
	// signal_not_declared).
	Declared []string `json:"declared,omitempty"`
	// Errors say what is wrong with a signal's payload, each at its JSON
	// Pointer (code invalid_signal_payload).
	Errors []sdk.SignalPayloadProblem `json:"errors,omitempty"`

	retryAfter time.Duration
}

// The problem codes.
const (
	CodeMalformedJSON   = "malformed_json"
	CodeUnknownField    = "unknown_field"
	CodeInvalidRequest  = "invalid_request"
	CodeUnknownTaskType = "unknown_task_type"
	CodeBadFilter       = "bad_filter"
	CodeFilterFailed    = "filter_failed"
	CodeFilterExpensive = "filter_too_expensive"
	CodeNotFound        = "not_found"
	CodeTaskState       = "task_state"
	CodeConflict        = "conflict"
	CodePayloadTooLarge = "payload_too_large"
	CodeQueueFull       = "queue_full"
	CodeHistoryFull     = "history_full"
	CodeUnauthorized    = "unauthorized"
	CodeForbidden       = "forbidden"
	CodeNotReady        = "not_ready"
	CodeInternal        = "internal"
	CodeTooSlow         = "diagnosis_too_slow"
	CodeUnavailable     = "database_unavailable"
	CodeUnsupported     = "unsupported"
	// The guards' (guard.go here, the server's and the console's).
	CodeHostNotAllowed   = "host_not_allowed"
	CodeCrossOrigin      = "cross_origin"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeUnsupportedForm  = "unsupported_form_type"

	CodeKeyReused   = "idempotency_key_reused"
	CodeBlobCorrupt = "blob_corrupt"
	CodeSealed      = "payload_sealed"
	// The callback links' (the server's callbacks.go).
	CodeCallbackUsed   = "callback_used"
	CodeWaitEnded      = "wait_ended"
	CodeWaitNotReached = "wait_not_reached"

	CodeUpdateRejected = "update_rejected"
	CodeUpdateNotFound = "update_not_found"
	CodeUpdateFailed   = "update_failed"
	CodeTooManyWaits   = "too_many_long_polls"
	CodeClaimLost      = "claim_lost"

	CodeQueryNotFound = "query_not_found"
	CodeQueryFailed   = "query_failed"
	CodeNoWorker      = "no_worker"
	CodeReplayFailed  = "replay_failed"

	// A task type's declared signals' (sdk.WorkflowOpts.Signals).
	CodeSignalNotDeclared = "signal_not_declared"
	CodeSignalPayload     = "invalid_signal_payload"
)

var titles = map[string]string{
	CodeMalformedJSON:     "The request body is not valid JSON",
	CodeUnknownField:      "The request body has a field the API does not know",
	CodeInvalidRequest:    "The request is invalid",
	CodeUnknownTaskType:   "No worker has registered this task type",
	CodeBadFilter:         "The CEL expression does not compile",
	CodeFilterFailed:      "The CEL expression failed on some events",
	CodeFilterExpensive:   "The CEL expression went over the request's limits",
	CodeNotFound:          "Not found",
	CodeTaskState:         "The task's state does not allow this",
	CodeConflict:          "The task changed concurrently; try again",
	CodePayloadTooLarge:   "The task input is larger than the server accepts",
	CodeQueueFull:         "The queue is full",
	CodeHistoryFull:       "The task's history is at its bound and takes no more signals",
	CodeUnauthorized:      "Authentication required",
	CodeForbidden:         "The token does not allow this",
	CodeNotReady:          "The server is not ready",
	CodeInternal:          "Internal server error",
	CodeTooSlow:           "The diagnosis took too long; try a shorter window",
	CodeUnavailable:       "The database holding the namespace does not answer",
	CodeUnsupported:       "The server's store does not support this",
	CodeHostNotAllowed:    "The server does not answer requests for this host name",
	CodeCrossOrigin:       "Cross-origin request refused",
	CodeUnsupportedMedia:  "The request body must be JSON",
	CodeUnsupportedForm:   "The console's forms are URL-encoded",
	CodeKeyReused:         "The idempotency key was used for another start",
	CodeBlobCorrupt:       "The blob is damaged",
	CodeSealed:            "The payload is encrypted and cannot be opened",
	CodeCallbackUsed:      "The callback link was used already",
	CodeWaitEnded:         "The wait this callback link answers has ended",
	CodeWaitNotReached:    "The task does not wait at this callback link's wait yet",
	CodeTooManyWaits:      "Too many long polls are open; try again later",
	CodeSignalNotDeclared: "The task's type does not declare a signal of this name",
	CodeSignalPayload:     "The signal's payload does not fit what the task's type declares",
	CodeQueryNotFound:     "The workflow has no query of this name",
	CodeQueryFailed:       "The query's handler failed",
	CodeNoWorker:          "No worker of the task's type answered",
	CodeReplayFailed:      "The task's history does not replay on its workers' code",
	CodeClaimLost:         "The claim no longer holds the remote step",
}

// NewProblem is the problem of status and code, its title code's, with
// detail.
func NewProblem(status int, code, detail string) *Problem {
	return &Problem{Type: "urn:cairn:problem:" + code, Title: titles[code], Status: status, Detail: detail, Code: code}
}

// ProblemFor maps an error from the sdk or engine to its problem; nil for
// an error it does not recognize, which the caller answers as internal:
// logged in full, answered without detail.
func ProblemFor(err error) *Problem {
	var full *cairntype.QueueFullError
	var syntax *sdk.FilterSyntaxError
	var limit *sdk.FilterLimitError
	var tooLarge *sdk.PayloadTooLargeError
	var historyFull *cairntype.HistoryFullError
	var queryNotFound *sdk.QueryNotFoundError
	var noWorker *sdk.NoWorkerError
	var notDeclared *sdk.SignalNotDeclaredError
	var badPayload *sdk.SignalPayloadError
	switch {
	case errors.Is(err, sdk.ErrClaimLost):
		// Before the store's own marks: a lost claim is fenced, and a
		// worker must drop the step, not retry.
		return NewProblem(http.StatusConflict, CodeClaimLost, err.Error())
	case errors.As(err, &queryNotFound):
		p := NewProblem(http.StatusNotFound, CodeQueryNotFound, queryNotFound.Error())
		p.Query, p.Registered = queryNotFound.Name, queryNotFound.Registered
		return p
	case errors.As(err, &noWorker):
		p := NewProblem(http.StatusServiceUnavailable, CodeNoWorker, noWorker.Error())
		p.Reason = noWorker.Reason
		if noWorker.Reason == sdk.NoWorkerAnswered {
			RetryAfter(p, time.Second)
		}
		return p
	case errors.Is(err, sdk.ErrQueryFailed):
		return NewProblem(http.StatusUnprocessableEntity, CodeQueryFailed, err.Error())
	case errors.Is(err, sdk.ErrReplayFailed):
		return NewProblem(http.StatusConflict, CodeReplayFailed, err.Error())
	case errors.As(err, &notDeclared):
		p := NewProblem(http.StatusNotFound, CodeSignalNotDeclared, notDeclared.Error())
		p.Declared = notDeclared.Declared
		return p
	case errors.As(err, &badPayload):
		p := NewProblem(http.StatusUnprocessableEntity, CodeSignalPayload, badPayload.Error())
		p.Errors = badPayload.Problems
		return p
	case errors.As(err, &historyFull):
		// 409, not 413: the request is not too large; the task can take
		// no more, whatever is sent.
		p := NewProblem(http.StatusConflict, CodeHistoryFull, historyFull.Error())
		p.HistoryEvents, p.HistoryBytes = historyFull.Events, historyFull.Bytes
		if historyFull.MaxEvents > 0 && historyFull.Events+historyFull.Adding > historyFull.MaxEvents {
			p.MaxHistoryEvents = historyFull.MaxEvents
		} else {
			p.SizeBytes, p.LimitBytes = historyFull.AddingBytes, historyFull.MaxBytes
		}
		return p
	case errors.As(err, &tooLarge):
		p := NewProblem(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, tooLarge.Error())
		p.SizeBytes, p.LimitBytes = int64(tooLarge.Size), int64(tooLarge.Limit)
		return p
	case errors.Is(err, sdk.ErrPayloadTooLarge):
		// A bound of its own (a remote step's stream chunks): the error
		// says which.
		return NewProblem(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, err.Error())
	case errors.As(err, &limit):
		detail := limit.Error()
		if hint := errors.FlattenHints(err); hint != "" {
			detail += " (hint: " + hint + ")"
		}
		p := NewProblem(http.StatusUnprocessableEntity, CodeFilterExpensive, detail)
		p.Exceeded = limit.Limit
		return p
	case errors.As(err, &full):
		p := NewProblem(http.StatusTooManyRequests, CodeQueueFull, full.Error())
		p.retryAfter = full.RetryAfter
		p.RetryAfterSeconds = retryAfterSeconds(full.RetryAfter)
		return p
	case errors.As(err, &syntax):
		p := NewProblem(http.StatusBadRequest, CodeBadFilter, syntax.Error())
		p.Line, p.Column = syntax.Line, syntax.Column
		return p
	case errors.Is(err, sdk.ErrBadFilter):
		return NewProblem(http.StatusBadRequest, CodeBadFilter, err.Error())
	case errors.Is(err, sdk.ErrFilterEvaluation):
		detail := err.Error()
		if hint := errors.FlattenHints(err); hint != "" {
			detail += " (hint: " + hint + ")"
		}
		return NewProblem(http.StatusBadRequest, CodeFilterFailed, detail)
	case errors.Is(err, payload.ErrSealed):
		// Its task was erased (its key destroyed), or this server has
		// no key for it: either way it cannot be read, ever, here.
		return NewProblem(http.StatusGone, CodeSealed,
			"the payload stays encrypted: its task was erased (its key destroyed), or this server has no key for it")
	case errors.Is(err, sdk.ErrBlobCorrupt):
		return NewProblem(http.StatusInternalServerError, CodeBlobCorrupt, err.Error())
	case errors.Is(err, sdk.ErrIdempotencyKeyReused):
		// Neither the task holding the key nor its state: the caller may
		// not be allowed to read it.
		return NewProblem(http.StatusConflict, CodeKeyReused,
			"the idempotency key is taken by a task of another type or input: a new start needs a new key")
	case errors.Is(err, sdk.ErrUnknownType):
		return NewProblem(http.StatusBadRequest, CodeUnknownTaskType, err.Error())
	case errors.Is(err, sdk.ErrInvalid):
		return NewProblem(http.StatusBadRequest, CodeInvalidRequest, err.Error())
	case errors.Is(err, sdk.ErrUpdateRejected):
		return NewProblem(http.StatusUnprocessableEntity, CodeUpdateRejected, err.Error())
	case errors.Is(err, sdk.ErrUpdateNotFound):
		return NewProblem(http.StatusNotFound, CodeUpdateNotFound, err.Error())
	case errors.Is(err, sdk.ErrUpdateFailed):
		return NewProblem(http.StatusUnprocessableEntity, CodeUpdateFailed, err.Error())
	case errors.Is(err, sdk.ErrNotFound):
		return NewProblem(http.StatusNotFound, CodeNotFound, "no such task")
	case errors.Is(err, sdk.ErrTaskState):
		return NewProblem(http.StatusConflict, CodeTaskState, err.Error())
	case errors.Is(err, cairntype.ErrConflict), errors.Is(err, cairntype.ErrRetryable):
		return NewProblem(http.StatusConflict, CodeConflict, err.Error())
	case errors.Is(err, cairntype.ErrDiagnosisTooSlow):
		return NewProblem(http.StatusServiceUnavailable, CodeTooSlow, err.Error())
	case errors.Is(err, cairntype.ErrUnavailable):
		// Not the driver's text: it names hosts. With cells, only the
		// namespaces of the cell that is down answer this.
		p := NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "the database holding this namespace is out of reach; try again")
		p.retryAfter = time.Second
		p.RetryAfterSeconds = 1
		return p
	case errors.Is(err, cairntype.ErrUnsupported):
		return NewProblem(http.StatusNotImplemented, CodeUnsupported, err.Error())
	}
	return nil
}

// retryAfterSeconds rounds a hint up to whole seconds, as Retry-After
// carries them, and at least one.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// RetryAfter makes p ask the client to try again after d: a Retry-After
// header of whole seconds (at least one), repeated in RetryAfterSeconds.
func RetryAfter(p *Problem, d time.Duration) {
	p.retryAfter, p.RetryAfterSeconds = d, retryAfterSeconds(d)
}

// WriteProblem sends p, its instance the request's path as the client sent
// it: under prefix, the path the handler is mounted at.
func WriteProblem(w http.ResponseWriter, r *http.Request, prefix string, p *Problem) {
	p.Instance = prefix + r.URL.Path
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
