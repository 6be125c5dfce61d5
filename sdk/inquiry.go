package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// A worker answers the inquiries about tasks of its types (queries, and
// updates' validations: see update.go): its inquirer
// (engine.Inquirer, one per namespace, beside the claim loop) takes them
// and calls answerInquiry, which dispatches on the kind. Every kind
// shares the one step that needs the task's code: inspectTask, which
// reads the task's history through the worker's payload stage and
// replays it to its frontier (interpreter.Inspect), running no step, then
// calls a function on the stopped run.

// inquiryKinds are the kinds of inquiries a worker takes: those
// answerInquiry answers.
var inquiryKinds = []string{store.InquiryQuery, store.InquiryUpdate}

// answerInquiryTimeout bounds the write of an answer, which goes on after
// the inquiry's deadline (the asker reads it if it still waits).
const answerInquiryTimeout = 5 * time.Second

// inquiryHandler is the handler of the inquirer of the worker's cell st:
// it answers each inquiry it took (answerInquiry) and writes the answer.
func (w *Worker) inquiryHandler(st *edge.Store) engine.InquiryHandler {
	return func(ctx context.Context, in *store.Inquiry) error {
		answer, err := w.answerInquiry(ctx, st, in)
		code, msg, detail := inquiryErrorOf(err)
		if code != "" {
			answer = detail
		}
		if code == "" && len(answer) > MaxQueryAnswerBytes {
			code, msg, answer = inquiryFailed, fmt.Sprintf("the answer is %d bytes of JSON, over the bound of %d", len(answer), MaxQueryAnswerBytes), nil
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerInquiryTimeout)
		defer cancel()
		return st.AnswerInquiry(wctx, in, &store.InquiryAnswerParams{ID: in.ID, Namespace: in.Namespace, Owner: w.cfg.WorkerID,
			Answer: answer, ErrorCode: code, Error: truncateText(msg, store.MaxInquiryErrorBytes)})
	}
}

// answerInquiry answers in, an inquiry of a kind in inquiryKinds about a
// task of one of the worker's types, with its arguments as stored; ctx
// ends at the inquiry's deadline. It is the one place an inquiry's kind
// is dispatched on: a query is answered (answerQuery), an update validated
// and, accepted, recorded (answerUpdate).
func (w *Worker) answerInquiry(ctx context.Context, st *edge.Store, in *store.Inquiry) (json.RawMessage, error) {
	fn, ok := w.funcOf(in.Namespace, store.TypeKey{Type: in.TaskType, Version: in.TaskVersion})
	if !ok {
		return nil, errors.Newf("this worker does not register %s@%d in namespace %s", in.TaskType, in.TaskVersion, in.Namespace)
	}
	if err := st.OpenInquiry(ctx, in); err != nil {
		return nil, err
	}
	switch in.Kind {
	case store.InquiryQuery:
		return answerQuery(ctx, st, in.Namespace, in.TaskID, fn, in.Name, in.Args)
	case store.InquiryUpdate:
		return answerUpdate(ctx, st, in.Namespace, in.TaskID, fn, in.Name, in.Args)
	}
	return nil, errors.Newf("this worker does not answer inquiries of kind %q", in.Kind)
}

// answerQuery answers the query called name of task id of namespace ns,
// whose workflow is fn, with args (in clear): on the run inspectTask
// stops at the task's frontier.
func answerQuery(ctx context.Context, st *edge.Store, ns string, id uuid.UUID, fn interpreter.Func, name string, args json.RawMessage) (json.RawMessage, error) {
	var answer json.RawMessage
	err := inspectTask(ctx, st, ns, id, fn, func(in *interpreter.Inspection) error {
		var err error
		answer, err = in.CallQuery(name, args)
		return err
	})
	return answer, err
}

// inspectTask reads task id's history (of namespace ns) through st, its
// payloads decoded, and inspects its workflow fn at the history's
// frontier (interpreter.Inspect): the run replayed without running a
// step, then at called on the stopped run. The task's history is read
// whole: it is bounded (WorkerConfig.MaxHistoryEvents).
func inspectTask(ctx context.Context, st *edge.Store, ns string, id uuid.UUID, fn interpreter.Func, at func(*interpreter.Inspection) error) error {
	logs, err := st.EventList(ctx, &store.EventListParams{Namespace: ns, After: map[uuid.UUID]int64{id: 0}})
	if err != nil {
		return errors.Wrapf(err, "read the history of task %s", id)
	}
	events := logs[id]
	if len(events) == 0 {
		return errors.Wrapf(store.ErrNotFound, "task %s", id)
	}
	if events, err = decodeEventsIn(ctx, st, ns, id, events, nil, false); err != nil {
		return errors.Wrapf(err, "read the history of task %s", id)
	}
	state, err := history.Replay(events)
	if err != nil {
		return errors.Wrapf(err, "replay the history of task %s", id)
	}
	return interpreter.Inspect(ctx, id.String(), state, fn, at)
}

// inquiryErrorOf is the code, message and detail (JSON) an inquiry's
// answer fails with for err; "" for nil.
func inquiryErrorOf(err error) (code, msg string, detail json.RawMessage) {
	if err == nil {
		return "", "", nil
	}
	var nf *interpreter.HandlerNotFoundError
	switch {
	case errors.Is(err, errRejected):
		return inquiryUpdateRejected, err.Error(), nil
	case errors.Is(err, ErrTaskState):
		return inquiryTaskState, err.Error(), nil
	case errors.As(err, &nf) && nf.Kind == interpreter.KindUpdate:
		return inquiryUpdateNotFound, nf.Error(), nil
	case errors.As(err, &nf):
		d, _ := json.Marshal(notFoundDetail{Registered: slices.Clip(nf.Registered)})
		return inquiryNotFound, nf.Error(), d
	case errors.Is(err, interpreter.ErrBadArgs):
		return inquiryBadArgs, err.Error(), nil
	case errors.Is(err, interpreter.ErrReplayFailed):
		return inquiryReplayFailed, err.Error(), nil
	case errors.Is(err, store.ErrNotFound):
		return inquiryTaskGone, err.Error(), nil
	case errors.Is(err, context.DeadlineExceeded):
		return inquiryFailed, "the query did not answer in time: " + err.Error(), nil
	}
	return inquiryFailed, err.Error(), nil
}

// truncateText is s as an answer's error text keeps it: valid UTF-8
// without NUL, cut to at most n bytes on a rune boundary.
func truncateText(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// funcOf is the workflow the worker registers as key, when it runs
// namespace ns.
func (w *Worker) funcOf(ns string, key store.TypeKey) (interpreter.Func, bool) {
	if !slices.Contains(w.cfg.Namespaces, ns) {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	reg, ok := w.types[key]
	return reg.fn, ok
}
