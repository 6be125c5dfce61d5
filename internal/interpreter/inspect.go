package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// A workflow body registers handlers that callers outside the task reach
// (a query now; an update is the same shape): [Register] keeps them in the
// run, by kind and name, and [Inspect] replays a task's history to its
// frontier and hands the stopped run's handlers to its caller. A handler
// is called only on a run that has ended (the replay stopped): it reads
// what the body's variables held there, and every call it makes into the
// workflow API is refused (errReadOnly), so it can run no step and write
// nothing.

// KindQuery is the kind of a query's handler ([SetQuery]): read-only,
// answered from the state a replay reaches.
const KindQuery = "query"

// MaxHandlerNameBytes bounds the name of a registered handler (a
// query's): 200 bytes.
const MaxHandlerNameBytes = 200

// ValidHandlerName returns why name cannot name a handler, or nil: a
// name is 1..[MaxHandlerNameBytes] bytes of printable UTF-8 (spaces
// allowed, no control characters), as a patch id is.
func ValidHandlerName(name string) error {
	switch {
	case name == "":
		return errors.New("a handler name must not be empty")
	case len(name) > MaxHandlerNameBytes:
		return errors.Newf("a handler name of %d bytes is over the limit of %d", len(name), MaxHandlerNameBytes)
	case !utf8.ValidString(name):
		return errors.Newf("handler name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return errors.Newf("handler name %q holds the unprintable character %U", name, r)
		}
	}
	return nil
}

var (
	// ErrReplayFailed marks an [Inspect] whose replay did not reach the
	// task's frontier: the workflow's code parts from the history (the
	// error is also marked [ErrNondeterministic]), or, for a completed
	// history, goes on past its end.
	ErrReplayFailed = errors.New("cairn/workflow: the history does not replay")
	// ErrBadArgs marks a handler's arguments that do not decode into the
	// handler's argument type ([TypedQuery]).
	ErrBadArgs = errors.New("cairn/workflow: bad arguments")
	// ErrReadOnly marks a call of the workflow API (Step, Sleep, Receive,
	// …) from a handler [Inspect] called: handlers read, they do not act.
	ErrReadOnly = errors.New("cairn/workflow: a handler is read-only")
)

func errReadOnly(api string) error {
	err := errors.Newf("workflow.%s called from a query handler", api)
	err = errors.WithHint(err, "a query handler reads the workflow's variables and returns; it may not call Step, Sleep, Receive, Go or any other workflow call")
	return errmark.Mark(err, ErrReadOnly)
}

// Register makes h the handler of kind called name in ctx's run, in place
// of one registered before under the name: what workflow.SetQuery does for
// a query. An invalid name (see [ValidHandlerName]) or a nil h ends the
// run with an error marked [ErrBadStepOpts], which Register returns, as
// it returns the run's abort if it had one.
func Register(ctx Context, kind, name string, h any) error {
	s := ctx.run()
	if err := s.enter("Set" + kindTitle(kind)); err != nil {
		return err
	}
	if err := ValidHandlerName(name); err != nil {
		return s.abort(errmark.Mark(errors.Wrapf(err, "workflow.Set%s", kindTitle(kind)), ErrBadStepOpts), nil)
	}
	if h == nil {
		return s.abort(errmark.Mark(errors.Newf("workflow.Set%s(%q): the handler is nil", kindTitle(kind), name), ErrBadStepOpts), nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers == nil {
		s.handlers = map[string]map[string]any{}
	}
	if s.handlers[kind] == nil {
		s.handlers[kind] = map[string]any{}
	}
	s.handlers[kind][name] = h
	return nil
}

// kindTitle is kind as the workflow call that registers it names it
// ("query": "Query").
func kindTitle(kind string) string {
	if kind == "" {
		return ""
	}
	return string(unicode.ToUpper(rune(kind[0]))) + kind[1:]
}

// QueryHandler is a query's handler with its arguments and answer in
// their JSON encodings; [TypedQuery] builds one from a typed function.
type QueryHandler func(args json.RawMessage) (json.RawMessage, error)

// SetQuery registers h as the query called name: [Register] of
// [KindQuery].
func SetQuery(ctx Context, name string, h QueryHandler) error {
	if h == nil {
		return Register(ctx, KindQuery, name, nil)
	}
	return Register(ctx, KindQuery, name, h)
}

// TypedQuery adapts a typed handler to a [QueryHandler]: it decodes the
// arguments (absent or JSON null: the zero value; undecodable: an error
// marked [ErrBadArgs]) and encodes the answer.
func TypedQuery[A, R any](fn func(A) (R, error)) QueryHandler {
	if fn == nil {
		return nil
	}
	return func(raw json.RawMessage) (json.RawMessage, error) {
		var args A
		if history.MaybeSealed(raw) {
			return nil, errSealed("the query's arguments")
		}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &args); err != nil {
				return nil, errmark.Mark(errors.Wrap(err, "decode the query's arguments"), ErrBadArgs)
			}
		}
		answer, err := fn(args)
		if err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(answer)
		if err != nil {
			return nil, errors.Wrap(err, "encode the query's answer")
		}
		return encoded, nil
	}
}

// Inspection is a run [Inspect] replayed to the end of its task's history
// and stopped there: what its body registered by then, and how the
// replay ended. It is valid during Inspect's call of its function only.
type Inspection struct {
	// TaskID is the task's id; State the state its history replays to
	// (State.LastSeq is the last event the replay saw: a write fenced on
	// it is refused if anything was appended since).
	TaskID string
	State  history.State
	// Result is how the replay ended: Err nil when the workflow returned
	// (a finished task), [ErrCollected] when it stopped at the first call
	// the history has not recorded (a task in flight: Result.Collected
	// names the call), else the error that ended the body (a step's
	// recorded failure, the body's own error, a payload it could not
	// read). The handlers registered before it ended stand either way.
	Result Result

	s *runState
}

// Handler returns the handler of kind called name the body registered
// before the replay stopped.
func (in *Inspection) Handler(kind, name string) (any, bool) {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	h, ok := in.s.handlers[kind][name]
	return h, ok
}

// Names returns the names of the handlers of kind registered, sorted.
func (in *Inspection) Names(kind string) []string {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	names := make([]string, 0, len(in.s.handlers[kind]))
	for name := range in.s.handlers[kind] {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Stopped reports whether the replay ended short of the frontier on an
// error of the body's (Result.Err other than [ErrCollected]): a handler
// missing then may be one the body never reached.
func (in *Inspection) Stopped() error {
	if in.Result.Err == nil || errors.Is(in.Result.Err, ErrCollected) {
		return nil
	}
	return in.Result.Err
}

// Inspect replays fn over the history whose state is s, executing
// nothing (a collect-only, strict run, as [Replay]'s), to the task's
// frontier: the run stops at the first call the history has not recorded
// (a task in flight), or where the workflow returns (a finished task).
// Then it calls at with the stopped run, whose handlers at may call:
// every call they make into the workflow API fails with [ErrReadOnly].
// Inspect returns at's error.
//
// A replay that parts from the history is not inspected: Inspect returns
// an error marked [ErrReplayFailed] and [ErrNondeterministic] (a
// [*NondeterminismError] is in its chain). ctx bounds the replay and at:
// once it is done Inspect returns its error, without waiting for at (a
// handler that loops is left running; it can do nothing to the task). A
// panic in at is returned as an error.
func Inspect(ctx context.Context, taskID string, s history.State, fn Func, at func(*Inspection) error) error {
	p := StateParams(taskID, s)
	p.Context, p.CollectOnly, p.Strict = ctx, true, true
	p.Record = func(history.Payload) error { return errors.New("an inspection records nothing") }
	p.StartChildren = func([]ChildRequest) error { return errors.New("an inspection starts no children") }
	var run *runState
	p.inspected = &run
	res := Run(p, fn, s.Scheduled.Input)
	if err := ctx.Err(); err != nil {
		return err
	}
	var nd *NondeterminismError
	switch {
	case errors.As(res.Err, &nd):
		return errmark.Mark(errors.Wrap(res.Err, "replay"), ErrReplayFailed)
	case errors.Is(res.Err, ErrCollected) && s.Status == history.StatusCompleted:
		nd = &NondeterminismError{Kind: "end", Position: len(s.Steps), Recorded: "(workflow returned)", Called: "(" + res.Collected + ")"}
		return errmark.Mark(errmark.Mark(errors.Wrap(nd, "replay"), ErrNondeterministic), ErrReplayFailed)
	}
	run.readOnly.Store(true)
	f := &Inspection{TaskID: taskID, State: s, Result: res, s: run}
	done := make(chan error, 1) // buffered: a call left running when ctx ends sends and exits
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- errors.Newf("handler panicked: %v", r)
			}
		}()
		done <- at(f)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errors.Wrap(context.Cause(ctx), "the handler did not return in time")
	}
}

// CallQuery calls the query called name on in with args, as the body
// registered it: [ErrHandlerNotFound] when it registered none of that
// name (the error names those it did).
func (in *Inspection) CallQuery(name string, args json.RawMessage) (json.RawMessage, error) {
	h, ok := in.Handler(KindQuery, name)
	if !ok {
		return nil, in.notFound(KindQuery, name)
	}
	return h.(QueryHandler)(args)
}

// ErrHandlerNotFound marks a call of a handler the body did not register
// by the point the replay stopped.
var ErrHandlerNotFound = errors.New("cairn/workflow: no such handler")

// HandlerNotFoundError is the detail of [ErrHandlerNotFound]: the name
// asked for and those registered. Find it with errors.As.
type HandlerNotFoundError struct {
	Kind, Name string
	// Registered are the names of the handlers of Kind registered, sorted.
	Registered []string
	// Stopped, when set, is the error that ended the body before the
	// frontier: the handler may be registered after it.
	Stopped error
}

func (e *HandlerNotFoundError) Error() string {
	msg := fmt.Sprintf("the workflow registered no %s %q", e.Kind, e.Name)
	if len(e.Registered) > 0 {
		msg += fmt.Sprintf(" (it registered %q)", e.Registered)
	} else {
		msg += fmt.Sprintf(" (it registered no %s)", e.Kind)
	}
	if e.Stopped != nil {
		msg += fmt.Sprintf("; its replay ended early: %v", e.Stopped)
	}
	return msg
}

func (in *Inspection) notFound(kind, name string) error {
	return errmark.Mark(errors.WithStack(&HandlerNotFoundError{Kind: kind, Name: name, Registered: in.Names(kind), Stopped: in.Stopped()}),
		ErrHandlerNotFound)
}
