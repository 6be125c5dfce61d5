package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/celenv"
	"github.com/cairnflow/cairn/internal/errmark"
)

// FilterEvent is an event as an event filter sees it, as `event`.
type FilterEvent struct {
	Type    string    `cel:"type"`
	Seq     int64     `cel:"seq"`
	At      time.Time `cel:"at"`
	Attempt int       `cel:"attempt"`
	// Data is the payload, a CEL map (dyn): its fields under their JSON
	// names (see package history), every field present, with its zero
	// value where the stored JSON leaves it out; times are timestamps; a
	// step's or task's output and a task's input are their JSON, decoded
	// when read.
	Data any `cel:"data"`
}

// FilterEventTask is the task of an event as an event filter sees it, as
// `task`: its row as it is now, not as it was when the event was written.
type FilterEventTask struct {
	ID          string    `cel:"id"`
	Type        string    `cel:"type"`
	Version     int       `cel:"version"`
	Queue       string    `cel:"queue"`
	Namespace   string    `cel:"namespace"`
	Status      string    `cel:"status"`
	TraceID     string    `cel:"trace_id"`
	Labels      FilterMap `cel:"labels"`
	FairnessKey string    `cel:"fairness_key"`
}

// EventFilter is a compiled CEL expression over an event and its task: a
// bool that selects events for [Client.Audit]. It sees `event` (type, seq,
// at, attempt, data) and `task` (id, type, version, queue, namespace,
// status, trace_id, labels, fairness_key). For example:
//
//	event.type == "attempt_failed" && event.data.error.status == 429
//	event.type in ["task_dead_lettered", "task_failed"] && task.labels["team"] == "ap"
//	task.type == "invoice.extract" && event.type == "step_completed" && event.data.name == "ocr"
//	event.type == "task_forked" && task.id == "0190…"  // every fork of a task (Client.Fork)
//
// Top-level conjuncts that compare event.type, task.type or task.queue
// with string literals are also handed to the database, so fewer events
// are read; the expression still decides on every event read.
type EventFilter struct {
	expr      string
	prg       cel.Program
	prefilter EventPrefilter
	// usesData: the expression may read event.data, so each event's
	// payload is converted for it; otherwise that work is skipped.
	usesData bool
}

// EventPrefilter is what an [EventFilter] lets the database filter by,
// taken from its top-level conjuncts. It only narrows: every event it
// excludes has a conjunct that is false, so the expression is false too.
type EventPrefilter struct {
	EventTypes []history.Type // the event is one of these; nil: any type
	TaskType   string         // "": any
	Queue      string         // "": any
	// MatchesNothing: the conjuncts contradict each other (two different
	// task types, say); no event can match.
	MatchesNothing bool
}

// eventFilterEnv is the CEL environment of event filters, made once.
var eventFilterEnv = sync.OnceValues(func() (*cel.Env, error) {
	return celenv.New(
		ext.NativeTypes(reflect.TypeFor[FilterEvent](), reflect.TypeFor[FilterEventTask](), ext.ParseStructTags(true)),
		celenv.Strings(),
		cel.Variable("event", cel.ObjectType("sdk.FilterEvent")),
		cel.Variable("task", cel.ObjectType("sdk.FilterEventTask")),
	)
})

// CompileEventFilter compiles expr. A compile error is a
// [*FilterSyntaxError], marked [ErrBadFilter], saying what is wrong and
// where (line:column).
func CompileEventFilter(expr string) (*EventFilter, error) {
	ast, prg, err := compileFilter(eventFilterEnv, "event filter", expr)
	if err != nil {
		return nil, err
	}
	root := ast.NativeRep().Expr()
	return &EventFilter{expr: expr, prg: prg, prefilter: prefilterOf(root), usesData: readsEventData(root)}, nil
}

// String returns the filter's expression.
func (f *EventFilter) String() string { return f.expr }

// Prefilter returns what the filter lets the database filter by.
func (f *EventFilter) Prefilter() EventPrefilter {
	p := f.prefilter
	p.EventTypes = slices.Clone(p.EventTypes)
	return p
}

// Match reports whether r passes the filter. An evaluation error (a field
// the payload does not have, a cost over [FilterEvalCostLimit]) is
// returned, and r does not match.
func (f *EventFilter) Match(r *AuditRecord) (bool, error) {
	ok, _, err := f.match(context.Background(), r)
	return ok, err
}

// match is Match under ctx, which stops the evaluation when it ends; it
// also returns the evaluation's cost.
func (f *EventFilter) match(ctx context.Context, r *AuditRecord) (bool, uint64, error) {
	event := FilterEvent{Type: string(r.Event.Type), Seq: r.Event.Seq, At: r.Event.At, Attempt: r.Event.Attempt}
	if f.usesData {
		data, err := filterData(r.Event)
		if err != nil {
			return false, 0, errors.Wrapf(err, "filter on task %s event %d", r.Task.ID, r.Event.Seq)
		}
		event.Data = types.NewStringInterfaceMap(lazyJSON, data)
	}
	task := FilterEventTask{
		ID: r.Task.ID.String(), Type: r.Task.Type, Version: r.Task.Version, Queue: r.Task.Queue,
		Namespace: r.Task.Namespace, Status: string(r.Task.Status), TraceID: r.Task.TraceID,
		Labels: r.Task.Labels, FairnessKey: r.Task.FairnessKey,
	}
	if task.Labels == nil {
		task.Labels = FilterMap{}
	}
	out, spent, err := celenv.Eval(ctx, f.prg, map[string]any{"event": &event, "task": &task})
	if err != nil {
		return false, spent, errors.Wrapf(err, "filter on task %s event %d", r.Task.ID, r.Event.Seq)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, spent, errors.Newf("filter on task %s event %d returned a %s, not a bool", r.Task.ID, r.Event.Seq, out.Type())
	}
	return bool(b), spent, nil
}

// prefilterOf collects the conditions of the expression's top-level
// conjuncts the database can check.
func prefilterOf(root celast.Expr) EventPrefilter {
	var p EventPrefilter
	for _, c := range conjuncts(root) {
		p.narrow(c)
	}
	return p
}

// conjuncts flattens a tree of && into its operands.
func conjuncts(e celast.Expr) []celast.Expr {
	if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != operators.LogicalAnd {
		return []celast.Expr{e}
	}
	var out []celast.Expr
	for _, arg := range e.AsCall().Args() {
		out = append(out, conjuncts(arg)...)
	}
	return out
}

// narrow adds what conjunct c says, if it is `<field> == "literal"` (either
// way round) or `event.type in [literals]`; anything else says nothing the
// database can use.
func (p *EventPrefilter) narrow(c celast.Expr) {
	if c.Kind() != celast.CallKind || len(c.AsCall().Args()) != 2 {
		return
	}
	call := c.AsCall()
	lhs, rhs := call.Args()[0], call.Args()[1]
	switch call.FunctionName() {
	case operators.Equals:
		if _, ok := stringLiteral(lhs); ok {
			lhs, rhs = rhs, lhs
		}
		value, ok := stringLiteral(rhs)
		if !ok {
			return
		}
		switch varField(lhs) {
		case "event.type":
			p.keepEventTypes([]history.Type{history.Type(value)})
		case "task.type":
			p.TaskType = p.keepOne(p.TaskType, value)
		case "task.queue":
			p.Queue = p.keepOne(p.Queue, value)
		}
	case operators.In:
		values, ok := stringLiterals(rhs)
		if ok && varField(lhs) == "event.type" {
			p.keepEventTypes(values)
		}
	}
}

// keepEventTypes intersects the allowed event types with types.
func (p *EventPrefilter) keepEventTypes(types []history.Type) {
	if p.EventTypes == nil {
		// Not nil even when empty: nil would allow every type.
		p.EventTypes = append([]history.Type{}, slices.Compact(slices.Sorted(slices.Values(types)))...)
	} else {
		p.EventTypes = slices.DeleteFunc(p.EventTypes, func(t history.Type) bool { return !slices.Contains(types, t) })
	}
	if len(p.EventTypes) == 0 {
		p.MatchesNothing = true
	}
}

// keepOne returns the value a field must have after another conjunct says
// it equals value.
func (p *EventPrefilter) keepOne(current, value string) string {
	if current != "" && current != value {
		p.MatchesNothing = true
	}
	return value
}

// varField names a selection of a field of a variable, "event.type", or
// returns "".
func varField(e celast.Expr) string {
	if e.Kind() != celast.SelectKind || e.AsSelect().IsTestOnly() {
		return ""
	}
	operand := e.AsSelect().Operand()
	if operand.Kind() != celast.IdentKind {
		return ""
	}
	return operand.AsIdent() + "." + e.AsSelect().FieldName()
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// stringLiterals returns the strings of a list literal of string literals.
func stringLiterals(e celast.Expr) ([]history.Type, bool) {
	if e.Kind() != celast.ListKind {
		return nil, false
	}
	out := []history.Type{}
	for _, el := range e.AsList().Elements() {
		s, ok := stringLiteral(el)
		if !ok {
			return nil, false
		}
		out = append(out, history.Type(s))
	}
	return out, true
}

// readsEventData reports whether the expression may read event.data: it
// does unless every use of `event` selects another of its fields.
func readsEventData(root celast.Expr) bool {
	otherField := map[int64]bool{} // the uses of `event` that select a field other than data
	var uses []int64
	celast.PreOrderVisit(root, celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			sel := e.AsSelect()
			if op := sel.Operand(); op.Kind() == celast.IdentKind && op.AsIdent() == "event" && !sel.IsTestOnly() && sel.FieldName() != "data" {
				otherField[op.ID()] = true
			}
		case celast.IdentKind:
			if e.AsIdent() == "event" {
				uses = append(uses, e.ID())
			}
		}
	}))
	for _, id := range uses {
		if !otherField[id] {
			return true
		}
	}
	return false
}

// AuditParams select the events of [Client.Audit].
type AuditParams struct {
	// Filter selects events; nil for every event.
	Filter *EventFilter
	// Since and Until bound the events' times: Since <= at < Until. A zero
	// Since means from the first event, a zero Until now.
	Since, Until time.Time
	// Limit is the most records handed to fn; 0 or less for no limit.
	Limit int
}

// AuditRecord is an event and its task, as [Client.Audit] hands them out
// and as `cairn audit -o json` prints them.
type AuditRecord struct {
	Event AuditEvent `json:"event"`
	Task  AuditTask  `json:"task"`
}

// AuditEvent is the event of an [AuditRecord].
type AuditEvent struct {
	Type    history.Type    `json:"type"`
	Seq     int64           `json:"seq"`
	At      time.Time       `json:"at"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"` // the payload as stored, schema version "v" included
	// Payload is Data decoded.
	Payload history.Payload `json:"-"`
}

// AuditTask is the task of an [AuditRecord]: its row as it is now.
type AuditTask struct {
	ID          uuid.UUID         `json:"id"`
	Namespace   string            `json:"namespace"`
	Type        string            `json:"type"`
	Version     int               `json:"version"`
	Queue       string            `json:"queue"`
	Status      history.Status    `json:"status"`
	TraceID     string            `json:"trace_id,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	FairnessKey string            `json:"fairness_key,omitempty"`
}

func auditRecord(e *store.AuditEvent) AuditRecord {
	return AuditRecord{
		Event: AuditEvent{Type: e.Event.Type(), Seq: e.Event.Seq, At: e.Event.At, Attempt: e.Event.Attempt, Data: e.Data, Payload: e.Event.Data},
		Task: AuditTask{ID: e.TaskID, Namespace: e.Namespace, Type: e.TaskType, Version: e.TypeVersion, Queue: e.Queue,
			Status: e.Status, TraceID: e.TraceID, Labels: e.Labels, FairnessKey: e.FairnessKey},
	}
}

// Audit hands fn, in order of time (then task id and seq), every event of
// the client's namespace in [p.Since, p.Until) that p.Filter matches, with
// its task, page after page. It stops after p.Limit records, or when fn
// returns an error, which it returns. An event the filter cannot be
// evaluated on (it reads a field the payload does not have) is skipped;
// the audit goes on and then returns those errors, counted, with examples.
// With a filter, the reading and evaluating (not fn) is bounded by the
// client's [FilterLimits]: over them, Audit stops with
// [ErrFilterTooExpensive], whose [FilterLimitError] says up to which time
// events were read.
func (c *Client) Audit(ctx context.Context, p AuditParams, fn func(AuditRecord) error) error {
	until := p.Until
	if until.IsZero() {
		until = time.Now()
	}
	if !p.Since.Before(until) {
		return errors.Newf("audit: since %s is not before until %s", p.Since.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
	}
	walk := &auditWalk{lo: p.Since, until: until, window: auditFirstWindow,
		params: store.EventScanParams{Namespace: c.namespace, Limit: auditPageSize}}
	if f := p.Filter; f != nil {
		if f.prefilter.MatchesNothing {
			return nil
		}
		walk.params.EventTypes, walk.params.TaskType, walk.params.Queue = f.prefilter.EventTypes, f.prefilter.TaskType, f.prefilter.Queue
	}
	a := &audit{client: c, filter: p.Filter, budget: c.newFilterBudget()}
	handed := 0
	for !walk.done() {
		room := -1
		if p.Limit > 0 {
			room = p.Limit - handed
		}
		matches, err := a.page(ctx, walk, room)
		for _, rec := range matches {
			if cerr := ctx.Err(); cerr != nil {
				return errmark.Mark(errors.Wrap(cerr, "audit"), context.Cause(ctx))
			}
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
			handed++
		}
		if err != nil {
			return err
		}
		if p.Limit > 0 && handed >= p.Limit {
			break
		}
	}
	return a.evalErrors()
}

// evalErrors is the error an audit ends with when the filter failed on
// some events: nil when it never did.
func (a *audit) evalErrors() error {
	if a.failedEvals > 0 {
		return errmark.Mark(errors.WithHint(errors.Wrapf(a.evalErrs, "the filter failed on %d event(s), which were skipped; the first", a.failedEvals),
			`test the event type before reading its payload: event.type == "attempt_failed" && event.data.error.status == 429, or has(event.data.error) && ...`),
			ErrFilterEvaluation)
	}
	return nil
}

// audit is the state of one [Client.Audit] call; its goroutine owns it.
type audit struct {
	client      *Client
	filter      *EventFilter // nil: every event
	budget      *filterBudget
	evalErrs    error // the first maxFilterErrors evaluation errors
	failedEvals int
}

// page reads the walk's next page and returns the records of it the
// filter matches, at most room of them (-1: any), and an error that stops
// the audit.
func (a *audit) page(ctx context.Context, walk *auditWalk, room int) ([]AuditRecord, error) {
	if a.filter == nil {
		page, err := walk.next(ctx, a.client)
		if err != nil {
			return nil, errors.Wrap(err, "audit")
		}
		var out []AuditRecord
		for i := range page {
			if room >= 0 && len(out) >= room {
				break
			}
			out = append(out, auditRecord(&page[i]))
		}
		return out, nil
	}
	ctx, done := a.budget.page(ctx)
	defer done()
	page, err := walk.next(ctx, a.client)
	if err != nil {
		return nil, errors.Wrap(a.budget.readErr(ctx, err), "audit")
	}
	var out []AuditRecord
	for i := range page {
		if room >= 0 && len(out) >= room {
			break
		}
		if err := a.budget.scan(); err != nil {
			return out, err
		}
		a.budget.reached = page[i].Event.At
		rec := auditRecord(&page[i])
		ok, spent, err := a.filter.match(ctx, &rec)
		if stop := a.budget.evaluated(ctx, spent, err); stop != nil {
			return out, stop
		}
		if err != nil {
			if a.failedEvals++; a.failedEvals <= maxFilterErrors {
				a.evalErrs = errors.CombineErrors(a.evalErrs, err)
			}
			continue
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// The audit's paging. A page costs the database every event of its time
// window (the BRIN index narrows a read to a time range, in no order), so
// the audit walks its range in windows sized to hold about a page: a full
// page shrinks the next window to the span it covered, a short one grows it.
const (
	auditPageSize     = 2000
	auditFirstWindow  = time.Second
	auditMinWindow    = time.Millisecond
	auditMaxWindow    = 200 * 365 * 24 * time.Hour // time.Duration ends at 292 years; a zero Since starts in year 1
	auditMaxGrowthPer = 4                          // the most a window grows by from one page to the next
)

// auditWalk is the position of an audit in its time range: every event
// before lo has been read, and so has every event up to params.After, when
// set (it is at lo).
type auditWalk struct {
	params    store.EventScanParams
	lo, until time.Time
	window    time.Duration
}

func (w *auditWalk) done() bool { return !w.lo.Before(w.until) }

// next reads the next page of the current window and moves the window on.
func (w *auditWalk) next(ctx context.Context, c *Client) ([]store.AuditEvent, error) {
	hi := w.until
	if w.until.Sub(w.lo) > w.window {
		hi = w.lo.Add(w.window)
	}
	w.params.Since, w.params.Until = w.lo, hi
	page, err := c.store.EventScan(ctx, &w.params)
	if err == nil {
		err = c.openAudit(ctx, page)
	}
	if err != nil {
		return nil, err
	}
	if len(page) < w.params.Limit {
		// The window is exhausted: the next one starts at its end.
		w.lo, w.params.After = hi, nil
		w.window = grownWindow(w.window, len(page), w.params.Limit)
		return page, nil
	}
	// More of the window may remain: go on after the last event, with a
	// window as long as the span this page covered.
	last := page[len(page)-1]
	cursor := last.Cursor()
	w.window = max(last.Event.At.Sub(w.lo), auditMinWindow)
	w.lo, w.params.After = last.Event.At, &cursor
	return page, nil
}

// grownWindow is the next window after one of length window returned
// rows of a page of limit: long enough for about three quarters of a page
// at the same density, at least as long, at most auditMaxGrowthPer times.
func grownWindow(window time.Duration, rows, limit int) time.Duration {
	factor := float64(auditMaxGrowthPer)
	if rows > 0 {
		factor = min(max(0.75*float64(limit)/float64(rows), 1), auditMaxGrowthPer)
	}
	return time.Duration(min(float64(window)*factor, float64(auditMaxWindow))) // capped as a float: converting an overflow is undefined
}

// filterData is the payload of e as a filter sees it, as event.data.
func filterData(e AuditEvent) (map[string]any, error) {
	var v any
	if e.Payload != nil {
		v = filterValue(reflect.ValueOf(e.Payload))
	} else {
		// A record made by the caller: fall back to the stored JSON.
		var err error
		if v, err = decodeJSON(e.Data); err != nil {
			return nil, err
		}
	}
	data, ok := v.(map[string]any)
	if !ok {
		return nil, errors.Newf("event data is not a JSON object: %.40s", e.Data)
	}
	return data, nil
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
)

// filterValue converts a payload value for CEL: structs become maps by
// their JSON field names, every field included (omitempty or not, so that
// error.status is 0 rather than missing), times stay times, embedded JSON
// (outputs, inputs) is decoded, nil pointers are null, nil slices and
// maps empty.
func filterValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return filterValue(v.Elem())
	case reflect.Struct:
		if v.Type() == timeType {
			return v.Interface()
		}
		fields := jsonFieldsOf(v.Type())
		out := make(map[string]any, len(fields))
		for _, f := range fields {
			out[f.name] = filterValue(v.Field(f.index))
		}
		return out
	case reflect.Slice:
		if v.Type() == rawJSONType {
			if v.Len() == 0 {
				return nil
			}
			return json.RawMessage(v.Bytes()) // decoded by lazyJSON if the expression reads it
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = filterValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		for iter := v.MapRange(); iter.Next(); {
			out[iter.Key().String()] = filterValue(iter.Value())
		}
		return out
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	return nil
}

type jsonField struct {
	index int
	name  string
}

// jsonFieldCache holds the JSON fields of each payload struct type.
var jsonFieldCache sync.Map // reflect.Type -> []jsonField

// jsonFieldsOf returns the exported fields of struct type t with their
// JSON names.
func jsonFieldsOf(t reflect.Type) []jsonField {
	if cached, ok := jsonFieldCache.Load(t); ok {
		return cached.([]jsonField)
	}
	var fields []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := bytes.Cut([]byte(f.Tag.Get("json")), []byte(","))
		switch string(name) {
		case "-":
			continue
		case "":
			name = []byte(f.Name)
		}
		fields = append(fields, jsonField{index: i, name: string(name)})
	}
	jsonFieldCache.Store(t, fields)
	return fields
}

// lazyJSON adapts event data for CEL: embedded JSON (json.RawMessage) is
// decoded when the expression reads it, not before (most expressions never
// look at outputs, and decoding them was half the cost of a filter on
// event.data); maps and lists keep this adapter for their elements.
var lazyJSON types.Adapter = lazyJSONAdapter{}

type lazyJSONAdapter struct{}

func (a lazyJSONAdapter) NativeToValue(v any) ref.Val {
	switch x := v.(type) {
	case json.RawMessage:
		decoded, err := decodeJSON(x)
		if err != nil {
			return types.WrapErr(err)
		}
		return a.NativeToValue(decoded)
	case map[string]any:
		return types.NewStringInterfaceMap(a, x)
	case []any:
		return types.NewDynamicList(a, x)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// decodeJSON decodes JSON for CEL: whole numbers as int64, so `== 429`
// and `> 400` compare as written; others as float64. Empty data is null.
func decodeJSON(data []byte) (any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.Wrap(err, "decode event data")
	}
	return jsonNumbers(v), nil
}

// jsonNumbers replaces the json.Numbers in v by int64 or float64.
func jsonNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, el := range x {
			x[k] = jsonNumbers(el)
		}
	case []any:
		for i, el := range x {
			x[i] = jsonNumbers(el)
		}
	}
	return v
}
