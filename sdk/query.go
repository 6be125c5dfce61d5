package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// Errors of [Client.Query], each returned marked (test with errors.Is).
var (
	// ErrQueryNotFound: the workflow had registered no query of the name
	// by the point its replay stopped. The error is a
	// *[QueryNotFoundError] naming those it had.
	ErrQueryNotFound = errors.New("query not found")
	// ErrQueryFailed: the query's handler returned an error (or
	// panicked, or did not return in time); the message is its.
	ErrQueryFailed = errors.New("query failed")
	// ErrNoWorker: no worker runs the task's type and version (none has
	// registered it in the namespace), or none answered within the
	// query's timeout. The error is a *[NoWorkerError] saying which.
	ErrNoWorker = errors.New("no worker answered")
	// ErrReplayFailed: the task's history does not replay on the
	// worker's code (the code parts from it: see the replayer and the
	// deploy check), so its state cannot be told. Also marked
	// [workflow.ErrNondeterministic].
	ErrReplayFailed = errors.New("the task's history does not replay")
)

// Bounds of a query.
const (
	// DefaultQueryTimeout is [ClientConfig.QueryTimeout]'s default: a
	// query waits up to 10s for a worker's answer.
	DefaultQueryTimeout = 10 * time.Second
	// MaxQueryTimeout bounds [ClientConfig.QueryTimeout]: 1 minute.
	MaxQueryTimeout = time.Minute
	// MaxQueryArgsBytes bounds the JSON of a query's arguments: 64 KiB.
	MaxQueryArgsBytes = 64 << 10
	// MaxQueryAnswerBytes bounds the JSON of a query's answer: 1 MiB. A
	// larger answer fails the query ([ErrQueryFailed]).
	MaxQueryAnswerBytes = 1 << 20
)

// QueryNotFoundError is the detail of [ErrQueryNotFound].
type QueryNotFoundError struct {
	// Name is the query asked for; Registered the names the workflow had
	// registered where its replay stopped, sorted.
	Name       string
	Registered []string
	// Detail is the worker's account (and why the replay stopped early,
	// when it did).
	Detail string
}

func (e *QueryNotFoundError) Error() string { return e.Detail }

// The reasons of a [NoWorkerError].
const (
	// NoWorkerRegistered: no worker of the namespace has registered the
	// task's type and version.
	NoWorkerRegistered = "not_registered"
	// NoWorkerAnswered: workers registered it, but none answered in
	// time (none is running, or all are busy).
	NoWorkerAnswered = "no_answer"
)

// NoWorkerError is the detail of [ErrNoWorker].
type NoWorkerError struct {
	Namespace string
	Type      string
	Version   int
	// Reason is [NoWorkerRegistered] or [NoWorkerAnswered]; Waited, for
	// the latter, how long the query waited.
	Reason string
	Waited time.Duration
}

func (e *NoWorkerError) Error() string {
	if e.Reason == NoWorkerRegistered {
		return fmt.Sprintf("no worker of namespace %s has registered type %s version %d", e.Namespace, e.Type, e.Version)
	}
	return fmt.Sprintf("no worker of type %s version %d answered within %s", e.Type, e.Version, e.Waited)
}

// Query asks task id's workflow the query called name, with args, and
// decodes the answer into out (nil: the answer is dropped; a
// *json.RawMessage takes it as it is). The workflow registers its queries
// with workflow.SetQuery; docs/queries.md walks through them.
//
// A query is answered by replaying the task's history on code that has
// its type and version, running no step: as of the task's latest event,
// whether a worker holds the task, it waits (on a signal, a timer, its
// children) or it has finished. A task that continued as new is asked in
// its chain's current run. When [ClientConfig.Worker] registers the
// task's type and version, the client replays it itself, in process;
// otherwise it asks the workers through the database (an inquiry, which
// the first worker of the namespace with the type to take it answers),
// and waits up to [ClientConfig.QueryTimeout] (or ctx's deadline, if
// sooner).
//
// args is encoded as JSON (a json.RawMessage is taken as it is; nil: no
// arguments, the handler gets its argument type's zero value), at most
// [MaxQueryArgsBytes]. It returns an error marked [ErrNotFound] for an
// unknown task, [ErrInvalid] for a bad name or arguments (ones that do not
// decode into the handler's type included), [ErrPayloadTooLarge] for
// arguments over the bound, [ErrQueryNotFound], [ErrQueryFailed],
// [ErrNoWorker] or [ErrReplayFailed]. A query writes nothing to the
// task's history.
func (c *Client) Query(ctx context.Context, id uuid.UUID, name string, args, out any) error {
	answer, err := c.query(ctx, id, name, args)
	if err != nil {
		return err
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *json.RawMessage:
		*o = answer
		return nil
	}
	return errors.Wrapf(json.Unmarshal(answer, out), "query %q: decode the answer", name)
}

func (c *Client) query(ctx context.Context, id uuid.UUID, name string, args any) (json.RawMessage, error) {
	if err := interpreter.ValidHandlerName(name); err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "query"), ErrInvalid)
	}
	raw, err := queryArgs(name, args)
	if err != nil {
		return nil, err
	}
	t, err := engine.LatestRun(ctx, c.store.Engine(), c.namespace, id)
	if err != nil {
		return nil, errors.Wrapf(err, "query %q of task %s", name, id)
	}
	timeout := c.queryTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if fn, ok := c.localFunc(store.TypeKey{Type: t.Type, Version: t.TypeVersion}); ok {
		qctx, cancel := context.WithTimeout(ctx, max(timeout, time.Millisecond))
		defer cancel()
		answer, err := answerQuery(qctx, c.store, c.namespace, t.ID, fn, name, raw)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		code, msg, detail := inquiryErrorOf(err)
		return answer, queryError(name, code, msg, detail)
	}
	res, err := c.inquire(ctx, t, store.InquiryQuery, name, raw, timeout)
	if err != nil {
		return nil, err
	}
	return res.Answer, queryError(name, res.Code, res.Error, res.Detail)
}

// queryArgs encodes a query's arguments, checked as a signal's payload is.
func queryArgs(name string, args any) (json.RawMessage, error) {
	if args == nil {
		return nil, nil
	}
	raw, ok := args.(json.RawMessage)
	if ok {
		if len(raw) == 0 {
			return nil, nil
		}
		if !json.Valid(raw) {
			return nil, errmark.Mark(errors.Newf("query %q: the arguments are not valid JSON", name), ErrInvalid)
		}
		if err := jsoncheck.Check(raw, "args"); err != nil {
			return nil, errmark.Mark(errors.Wrapf(err, "query %q", name), ErrInvalid)
		}
	} else {
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, errmark.Mark(errors.Wrapf(err, "query %q: encode the arguments", name), ErrInvalid)
		}
		if err := jsoncheck.CheckMarshaled(raw, "args"); err != nil {
			return nil, errmark.Mark(errors.Wrapf(err, "query %q", name), ErrInvalid)
		}
	}
	if err := checkReserved("args", raw); err != nil {
		return nil, errmark.Mark(errors.Wrapf(err, "query %q", name), ErrInvalid)
	}
	if len(raw) > MaxQueryArgsBytes {
		return nil, errmark.Mark(&PayloadTooLargeError{What: fmt.Sprintf("the arguments of query %q", name), Size: len(raw),
			Limit: MaxQueryArgsBytes}, ErrPayloadTooLarge)
	}
	if interpreter.HasNULEscape(raw) {
		return nil, errmark.Mark(errors.Newf("query %q: the arguments contain the character U+0000, which PostgreSQL cannot store in JSON", name), ErrInvalid)
	}
	return raw, nil
}

// inquiryResult is a worker's answer to an inquiry, decoded: Answer
// when Code is "", else the error's code (inquiryNotFound, …), text and
// detail (JSON).
type inquiryResult struct {
	Answer json.RawMessage
	Code   string
	Error  string
	Detail json.RawMessage
}

// inquire asks the workers of the namespace that register t's type and
// version kind name of task t, with args (in clear: the edge encodes
// them), and waits up to timeout for the answer, which it returns
// decoded; its error is the asking's (a *NoWorkerError marked
// ErrNoWorker when no worker has the type or none answered in time). It
// is the path of every question a worker answers for a client (a query,
// an update's validation): the inquiry is written
// (store.InquiryCreate), a worker takes it and answers (answerInquiry),
// and the answer's notification wakes the wait; the wait polls as well,
// backing off, in case it is lost.
func (c *Client) inquire(ctx context.Context, t *store.Task, kind, name string, args json.RawMessage, timeout time.Duration) (inquiryResult, error) {
	noWorker := &NoWorkerError{Namespace: c.namespace, Type: t.Type, Version: t.TypeVersion}
	registered, err := c.typeRegistered(ctx, t.Type, t.TypeVersion)
	if err != nil {
		return inquiryResult{}, err
	}
	if !registered {
		noWorker.Reason = NoWorkerRegistered
		return inquiryResult{}, errmark.Mark(noWorker, ErrNoWorker)
	}
	if timeout < time.Millisecond {
		return inquiryResult{}, errors.Wrapf(context.DeadlineExceeded, "%s %q of task %s", kind, name, t.ID)
	}
	id := uuid.New()
	var answered <-chan struct{}
	if l := c.waitListener(); l != nil {
		ch, stop := l.WaitFor(id) // before the inquiry exists: no answer goes unheard
		defer stop()
		answered = ch
	}
	began := time.Now()
	if err := c.store.Inquire(ctx, &store.InquiryCreateParams{ID: id, Namespace: c.namespace, TaskID: t.ID, TaskType: t.Type,
		TaskVersion: t.TypeVersion, Kind: kind, Name: name, Args: args, Timeout: timeout}); err != nil {
		return inquiryResult{}, errors.Wrapf(err, "%s %q of task %s", kind, name, t.ID)
	}
	if c.onInquiry != nil {
		c.onInquiry(id)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll, expired := inquiryFirstPoll, false
	for {
		in, err := c.store.InquiryGet(ctx, &store.InquiryGetParams{ID: id, Namespace: c.namespace})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return inquiryResult{}, errors.Wrapf(err, "%s %q of task %s", kind, name, t.ID)
		}
		if err == nil && in.State == store.InquiryAnswered {
			if err := c.store.OpenInquiry(ctx, in); err != nil {
				return inquiryResult{}, err
			}
			if in.ErrorCode != "" {
				return inquiryResult{Code: in.ErrorCode, Error: in.Error, Detail: in.Answer}, nil
			}
			return inquiryResult{Answer: in.Answer}, nil
		}
		if expired {
			noWorker.Reason, noWorker.Waited = NoWorkerAnswered, time.Since(began).Round(time.Millisecond)
			return inquiryResult{}, errmark.Mark(noWorker, ErrNoWorker)
		}
		timer := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return inquiryResult{}, ctx.Err()
		case <-answered:
		case <-timer.C:
			poll = min(2*poll, inquiryMaxPoll)
		case <-deadline.C:
			expired = true // read it once more: an answer may have come as time ran out
		}
		timer.Stop()
	}
}

// The polls of a wait for an inquiry's answer, beside the notification
// that ends it: 100ms, doubling up to 2s.
const (
	inquiryFirstPoll = 100 * time.Millisecond
	inquiryMaxPoll   = 2 * time.Second
)

// typeRegistered reports whether a worker of the client's namespace has
// registered type typ at version.
func (c *Client) typeRegistered(ctx context.Context, typ string, version int) (bool, error) {
	types, err := c.TaskTypes(ctx)
	if err != nil {
		return false, err
	}
	for _, t := range types {
		if t.Type == typ && t.Version == version {
			return true, nil
		}
	}
	return false, nil
}

// localFunc is the workflow of key that the client's in-process worker
// ([ClientConfig.Worker]) registers for the client's namespace.
func (c *Client) localFunc(key store.TypeKey) (interpreter.Func, bool) {
	if c.worker == nil {
		return nil, false
	}
	return c.worker.funcOf(c.namespace, key)
}

// The codes an inquiry's answer fails with (store.Inquiry.ErrorCode), and
// the HTTP API's problems say.
const (
	inquiryNotFound     = "query_not_found"
	inquiryFailed       = "query_failed"
	inquiryBadArgs      = "bad_args"
	inquiryReplayFailed = "replay_failed"
	inquiryTaskGone     = "not_found"
)

// queryError is the error of an answer that failed with code and msg
// (detail, for query_not_found, the names registered): nil when code is
// "".
func queryError(name, code, msg string, detail json.RawMessage) error {
	switch code {
	case "":
		return nil
	case inquiryNotFound:
		e := &QueryNotFoundError{Name: name, Detail: msg}
		var d notFoundDetail
		if json.Unmarshal(detail, &d) == nil {
			e.Registered = d.Registered
		}
		return errmark.Mark(e, ErrQueryNotFound)
	case inquiryBadArgs:
		return errmark.Mark(errors.Newf("query %q: %s", name, msg), ErrInvalid)
	case inquiryReplayFailed:
		return errmark.Mark(errmark.Mark(errors.Newf("query %q: %s", name, msg), ErrReplayFailed), interpreter.ErrNondeterministic)
	case inquiryTaskGone:
		return errmark.Mark(errors.Newf("query %q: %s", name, msg), ErrNotFound)
	}
	return errmark.Mark(errors.Newf("query %q: %s", name, msg), ErrQueryFailed)
}

// notFoundDetail is the detail a query_not_found answer carries.
type notFoundDetail struct {
	Registered []string `json:"registered"`
}
