package sdk

import (
	"reflect"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
)

// ErrBadFilter marks an error from [CompileTaskFilter].
var ErrBadFilter = errors.New("bad task filter")

// filterCostLimit bounds one evaluation of a task filter.
const filterCostLimit = 1_000_000

// FilterTask is a task as a filter sees it, as `task`.
type FilterTask struct {
	ID             string            `cel:"id"`
	Type           string            `cel:"type"`
	Version        int               `cel:"version"`
	Queue          string            `cel:"queue"`
	Status         string            `cel:"status"`
	Attempt        int               `cel:"attempt"`
	Priority       int               `cel:"priority"`
	IdempotencyKey string            `cel:"idempotency_key"`
	Labels         map[string]string `cel:"labels"`
	CreatedAt      time.Time         `cel:"created_at"`
	FinishedAt     time.Time         `cel:"finished_at"` // zero (1970 in CEL terms: timestamp(0)) while unfinished
}

// FilterError is a task's last error as a filter sees it, as `error`; all
// fields are empty when the task has none.
type FilterError struct {
	Class        string            `cel:"class"`
	Message      string            `cel:"message"`
	Kind         string            `cel:"kind"`
	Status       int               `cel:"status"`
	Attrs        map[string]string `cel:"attrs"`
	Step         string            `cel:"step"`
	ClassifiedBy string            `cel:"classified_by"`
}

// TaskFilter is a compiled CEL expression over a task: a bool that selects
// tasks for listing or bulk operations. It sees `task` (id, type, version,
// queue, status, attempt, priority, idempotency_key, labels, created_at,
// finished_at) and `error` (the last error: class, message, kind, status,
// attrs, step, classified_by). For example:
//
//	task.type == "invoice.extract" && error.status == 503
//	error.kind == "rate_limited" && task.finished_at > timestamp("2026-11-01T00:00:00Z")
type TaskFilter struct {
	expr string
	prg  cel.Program
}

var (
	filterEnvOnce sync.Once
	filterEnv     *cel.Env
	filterEnvErr  error
)

func taskFilterEnv() (*cel.Env, error) {
	filterEnvOnce.Do(func() {
		filterEnv, filterEnvErr = cel.NewEnv(
			ext.NativeTypes(reflect.TypeFor[FilterTask](), reflect.TypeFor[FilterError](), ext.ParseStructTags(true)),
			ext.Strings(),
			cel.Variable("task", cel.ObjectType("sdk.FilterTask")),
			cel.Variable("error", cel.ObjectType("sdk.FilterError")),
		)
	})
	return filterEnv, filterEnvErr
}

// CompileTaskFilter compiles expr. The error, marked [ErrBadFilter], says
// what is wrong and where (line:column).
func CompileTaskFilter(expr string) (*TaskFilter, error) {
	env, err := taskFilterEnv()
	if err != nil {
		return nil, errors.Wrap(err, "filter environment")
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, errors.Mark(errors.Newf("filter: %s", celIssues(iss.Err())), ErrBadFilter)
	}
	if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
		return nil, errors.Mark(errors.Newf("filter returns %s; it must return a bool", out), ErrBadFilter)
	}
	prg, err := env.Program(ast, cel.CostLimit(filterCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, errors.Mark(errors.Wrap(err, "filter"), ErrBadFilter)
	}
	return &TaskFilter{expr: expr, prg: prg}, nil
}

// String returns the filter's expression.
func (f *TaskFilter) String() string { return f.expr }

// Match reports whether t passes the filter. An evaluation error (a missing
// label, a cost over the limit) is returned, and t does not match.
func (f *TaskFilter) Match(t *TaskInfo) (bool, error) {
	task := FilterTask{
		ID: t.ID.String(), Type: t.Type, Version: t.TypeVersion, Queue: t.Queue, Status: string(t.Status),
		Attempt: t.Attempt, Priority: t.Priority, IdempotencyKey: t.IdempotencyKey, Labels: t.Labels,
		CreatedAt: t.CreatedAt, FinishedAt: time.Unix(0, 0).UTC(),
	}
	if task.Labels == nil {
		task.Labels = map[string]string{}
	}
	if t.FinishedAt != nil {
		task.FinishedAt = *t.FinishedAt
	}
	errv := FilterError{Attrs: map[string]string{}}
	if e := t.LastError; e != nil {
		errv = filterError(e)
	}
	out, _, err := f.prg.Eval(map[string]any{"task": task, "error": errv})
	if err != nil {
		return false, errors.Wrapf(err, "filter on task %s", t.ID)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, errors.Newf("filter on task %s returned a %s, not a bool", t.ID, out.Type())
	}
	return bool(b), nil
}

func filterError(e *history.ErrorInfo) FilterError {
	attrs := e.Attrs
	if attrs == nil {
		attrs = map[string]string{}
	}
	return FilterError{Class: string(e.Class), Message: e.Message, Kind: e.Kind, Status: e.Status, Attrs: attrs,
		Step: e.Step, ClassifiedBy: e.ClassifiedBy}
}

// celIssues formats CEL's compile errors: "line:column: what", with the
// source line and a caret under the spot.
func celIssues(err error) string {
	msg := strings.ReplaceAll(err.Error(), "ERROR: <input>:", "")
	return strings.ReplaceAll(msg, "<input>:", "")
}
