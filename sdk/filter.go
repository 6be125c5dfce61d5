package sdk

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/celenv"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrBadFilter marks an error from [CompileTaskFilter] and
// [CompileEventFilter].
var ErrBadFilter = errors.New("bad task filter")

// ErrFilterEvaluation marks an error from [Client.Audit] when the filter
// could not be evaluated on some events (it read a field their payload
// lacks): those were skipped, the others handed out. The error's hint
// says how to write the filter.
var ErrFilterEvaluation = errors.New("filter failed on some events")

// FilterSyntaxError is a filter expression that does not compile: a syntax
// error, an unknown name, an operator applied to the wrong types, a result
// that is not a bool. [CompileTaskFilter] and [CompileEventFilter] return
// it marked [ErrBadFilter]; errors.As finds it.
type FilterSyntaxError struct {
	Expr    string // the expression as given
	Message string // the first problem, e.g. "Syntax error: mismatched input '=' ..."
	// Line and Column locate the first problem, from 1 (Column counts
	// characters); 0 when CEL gave no position.
	Line, Column int
	// detail is CEL's report of every problem: "line:column: message",
	// the source line and a caret under the spot.
	detail string
}

func (e *FilterSyntaxError) Error() string {
	if e.detail != "" {
		return "filter: " + e.detail
	}
	return fmt.Sprintf("filter: %d:%d: %s", e.Line, e.Column, e.Message)
}

// filterSyntaxError describes the issues CEL found compiling expr.
func filterSyntaxError(expr string, iss *cel.Issues) error {
	// The first problem CEL locates, if any: it sorts the ones it cannot
	// place (column -1, such as a macro's "argument is not an identifier")
	// first, on line 1.
	errs := iss.Errors()
	first := errs[0]
	located := func(loc common.Location) bool { return loc != nil && loc.Line() > 0 && loc.Column() >= 0 }
	if i := slices.IndexFunc(errs, func(e *cel.Error) bool { return located(e.Location) }); i >= 0 {
		first = errs[i]
	}
	e := &FilterSyntaxError{Expr: expr, Message: first.Message, detail: celIssues(iss.Err())}
	if loc := first.Location; located(loc) {
		e.Line, e.Column = loc.Line(), loc.Column()+1 // CEL counts columns from 0
	}
	return errmark.Mark(e, ErrBadFilter)
}

// checkFilterResult refuses an expression whose type is known not to be a
// bool (dyn is decided when it runs), locating it at its start.
func checkFilterResult(expr string, ast *cel.Ast) error {
	out := ast.OutputType()
	if out.IsExactType(cel.BoolType) || out.IsExactType(cel.DynType) {
		return nil
	}
	loc := ast.NativeRep().SourceInfo().GetStartLocation(ast.NativeRep().Expr().ID())
	e := &FilterSyntaxError{Expr: expr, Message: fmt.Sprintf("the filter returns %s; it must return a bool", out), Line: 1, Column: 1}
	if loc.Line() > 0 {
		e.Line, e.Column = loc.Line(), loc.Column()+1
	}
	return errmark.Mark(e, ErrBadFilter)
}

// FilterMap is a map(string, string) of a filter (task labels, error
// attributes) whose lookup of a missing key is "" rather than an error:
// `task.labels["src"] == "curl"` is false on a task without the label,
// and `task.labels["src"] != "curl"` true. `has(task.labels.src)` and
// `"src" in task.labels` tell a missing key from an empty value.
type FilterMap = celenv.StringMap

// FilterTask is a task as a filter sees it, as `task`.
type FilterTask struct {
	ID             string    `cel:"id"`
	Type           string    `cel:"type"`
	Version        int       `cel:"version"`
	Queue          string    `cel:"queue"`
	Status         string    `cel:"status"`
	Attempt        int       `cel:"attempt"`
	Priority       int       `cel:"priority"`
	IdempotencyKey string    `cel:"idempotency_key"`
	Labels         FilterMap `cel:"labels"`
	CreatedAt      time.Time `cel:"created_at"`
	FinishedAt     time.Time `cel:"finished_at"` // zero (1970 in CEL terms: timestamp(0)) while unfinished
}

// FilterError is a task's last error as a filter sees it, as `error`; all
// fields are empty when the task has none.
type FilterError struct {
	Class        string    `cel:"class"`
	Message      string    `cel:"message"`
	Kind         string    `cel:"kind"`
	Status       int       `cel:"status"`
	Attrs        FilterMap `cel:"attrs"`
	Step         string    `cel:"step"`
	ClassifiedBy string    `cel:"classified_by"`
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

// taskFilterEnv is the CEL environment of task filters, made once.
var taskFilterEnv = sync.OnceValues(func() (*cel.Env, error) {
	return celenv.New(
		ext.NativeTypes(reflect.TypeFor[FilterTask](), reflect.TypeFor[FilterError](), ext.ParseStructTags(true)),
		celenv.Strings(),
		cel.Variable("task", cel.ObjectType("sdk.FilterTask")),
		cel.Variable("error", cel.ObjectType("sdk.FilterError")),
	)
})

// CompileTaskFilter compiles expr. A compile error is a
// [*FilterSyntaxError], marked [ErrBadFilter], saying what is wrong and
// where (line:column).
func CompileTaskFilter(expr string) (*TaskFilter, error) {
	_, prg, err := compileFilter(taskFilterEnv, "filter", expr)
	if err != nil {
		return nil, err
	}
	return &TaskFilter{expr: expr, prg: prg}, nil
}

// compileFilter compiles expr, a bool expression, in the environment env
// makes, into a program bounded by [FilterEvalCostLimit] that stops when
// its context ends. what names the filter in errors.
func compileFilter(env func() (*cel.Env, error), what, expr string) (*cel.Ast, cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, nil, errors.Wrapf(err, "%s environment", what)
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, nil, filterSyntaxError(expr, iss)
	}
	if err := checkFilterResult(expr, ast); err != nil {
		return nil, nil, err
	}
	prg, err := e.Program(ast, celenv.ProgramOptions(FilterEvalCostLimit)...)
	if err != nil {
		return nil, nil, errmark.Mark(errors.Wrap(err, what), ErrBadFilter)
	}
	return ast, prg, nil
}

// String returns the filter's expression.
func (f *TaskFilter) String() string { return f.expr }

// Match reports whether t passes the filter. An evaluation error (a missing
// label, a cost over [FilterEvalCostLimit]) is returned, and t does not
// match.
func (f *TaskFilter) Match(t *TaskInfo) (bool, error) {
	ok, _, err := f.match(context.Background(), t)
	return ok, err
}

// match is Match under ctx, which stops the evaluation when it ends; it
// also returns the evaluation's cost.
func (f *TaskFilter) match(ctx context.Context, t *TaskInfo) (bool, uint64, error) {
	task := FilterTask{
		ID: t.ID.String(), Type: t.Type, Version: t.TypeVersion, Queue: t.Queue, Status: string(t.Status),
		Attempt: t.Attempt, Priority: t.Priority, IdempotencyKey: t.IdempotencyKey, Labels: t.Labels,
		CreatedAt: t.CreatedAt, FinishedAt: time.Unix(0, 0).UTC(),
	}
	if task.Labels == nil {
		task.Labels = FilterMap{}
	}
	if t.FinishedAt != nil {
		task.FinishedAt = *t.FinishedAt
	}
	errv := FilterError{Attrs: FilterMap{}}
	if e := t.LastError; e != nil {
		errv = filterError(e)
	}
	out, spent, err := celenv.Eval(ctx, f.prg, map[string]any{"task": task, "error": errv})
	if err != nil {
		return false, spent, errors.Wrapf(err, "filter on task %s", t.ID)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, spent, errors.Newf("filter on task %s returned a %s, not a bool", t.ID, out.Type())
	}
	return bool(b), spent, nil
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
