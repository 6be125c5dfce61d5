package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	ij "github.com/invopop/jsonschema"
	sj "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/cairnflow/cairn/workflow"
)

// SignalDecl is a signal a workflow type declares it receives, and what
// its payload must be: made by [DeclareSignal], [DeclareApproval] or
// [DeclareSignalSchema], listed in [WorkflowOpts.Signals].
type SignalDecl struct {
	name   string
	schema json.RawMessage // a JSON Schema (2020-12 unless it says)
	err    error           // what went wrong making it, reported by NewWorkflow
}

// DeclareSignal declares the signal name, whose payload is a T as
// encoding/json writes it: what workflow.Receive[T](ctx, name, …) takes.
// The payload's JSON Schema is made from T (github.com/invopop/jsonschema):
// a field must be present unless it is omitempty (or omitzero) or may be
// nil (a pointer, slice, map or interface: null, or absent, reads as
// nil), each value must have its field's JSON type, and members T does not
// have are ignored, as json.Unmarshal ignores them. A payload of T = any may be
// anything, including none. A type that writes its own JSON (a
// MarshalJSON method) may say its schema with a JSONSchema method (see
// invopop/jsonschema) or be declared with [DeclareSignalSchema].
func DeclareSignal[T any](name string) SignalDecl {
	schema, err := schemaOf(reflect.TypeFor[T]())
	return SignalDecl{name: name, schema: schema, err: err}
}

// DeclareApproval declares the approval signal name, which
// workflow.AwaitApproval waits for: its payload is a [workflow.Decision],
// which must say "approved": true or false ("comment" and "by" are
// optional), as a callback link's ?decision=approve|reject does.
func DeclareApproval(name string) SignalDecl { return DeclareSignal[workflow.Decision](name) }

// DeclareSignalSchema declares the signal name with the JSON Schema
// (draft 2020-12 unless its $schema says another) its payload must
// satisfy, for payloads no Go type describes well. It may refer only to
// itself ($ref within the document): nothing is fetched.
func DeclareSignalSchema(name string, schema json.RawMessage) SignalDecl {
	return SignalDecl{name: name, schema: bytes.Clone(schema)}
}

// The bounds of a type's declarations, checked by [NewWorkflow]: they are
// kept in the type's registry row and read by every client that signals
// its tasks.
const (
	MaxDeclaredSignals   = 100      // signals one workflow type may declare
	MaxSignalSchemaBytes = 64 << 10 // bytes of one signal's JSON Schema
)

// declaredSignals checks a workflow's declarations and returns them as
// the registry keeps them: nil when decls is nil (none declared: any
// signal is taken), else each name's schema.
func declaredSignals(decls []SignalDecl) (map[string]json.RawMessage, error) {
	if decls == nil {
		return nil, nil
	}
	if len(decls) > MaxDeclaredSignals {
		return nil, errors.Newf("Signals: %d declared, at most %d allowed", len(decls), MaxDeclaredSignals)
	}
	out := make(map[string]json.RawMessage, len(decls))
	for _, d := range decls {
		if err := checkSignalText("name", d.name, MaxSignalNameBytes); err != nil {
			return nil, errors.Wrap(err, "Signals")
		}
		if d.err != nil {
			return nil, errors.Wrapf(d.err, "signal %q", d.name)
		}
		if _, dup := out[d.name]; dup {
			return nil, errors.Newf("Signals: %q is declared twice", d.name)
		}
		if len(d.schema) > MaxSignalSchemaBytes {
			return nil, errors.Newf("signal %q: its schema is %d bytes, at most %d allowed", d.name, len(d.schema), MaxSignalSchemaBytes)
		}
		if _, err := compileSignalSchema(d.schema); err != nil {
			return nil, errors.Wrapf(err, "signal %q", d.name)
		}
		out[d.name] = d.schema
	}
	return out, nil
}

// schemaOf makes the JSON Schema of a payload of Go type t (see
// [DeclareSignal]).
func schemaOf(t reflect.Type) (raw json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil { // invopop panics on a type JSON cannot hold (chan, func, complex)
			raw, err = nil, errors.Newf("no JSON Schema for payload type %s: %v", t, r)
		}
	}()
	r := &ij.Reflector{Anonymous: true, AllowAdditionalProperties: true}
	root := r.ReflectFromType(t)
	(&nullPass{defs: root.Definitions, done: map[*ij.Schema]bool{}}).walk(root, t)
	if nullable(t) && (root.Ref != "" || root.Type != "") {
		inner := *root
		inner.Version, inner.Definitions = "", nil
		root = &ij.Schema{Version: root.Version, Definitions: root.Definitions, AnyOf: []*ij.Schema{&inner, {Type: "null"}}}
	}
	raw, err = json.Marshal(root)
	return raw, errors.Wrapf(err, "JSON Schema of payload type %s", t)
}

// nullable says whether encoding/json writes null for a zero t: a nil
// pointer, slice, map or interface.
func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// nullPass lets the schema invopop made of a Go type accept null where
// encoding/json writes it: invopop describes a pointer, slice or map by
// what it holds, so a Go sender's nil would be refused.
type nullPass struct {
	defs ij.Definitions
	done map[*ij.Schema]bool
}

func (p *nullPass) walk(s *ij.Schema, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s == nil {
		return
	}
	if name, ok := strings.CutPrefix(s.Ref, "#/$defs/"); ok {
		if s = p.defs[name]; s == nil {
			return
		}
	}
	if p.done[s] {
		return
	}
	p.done[s] = true
	switch t.Kind() {
	case reflect.Struct:
		if s.Properties == nil {
			return
		}
		fields := jsonFields(t)
		for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
			if ft, ok := fields[pair.Key]; ok {
				pair.Value = p.member(pair.Value, ft)
				if nullable(ft) { // absent reads as nil, as null does
					s.Required = slices.DeleteFunc(s.Required, func(n string) bool { return n == pair.Key })
				}
			}
		}
	case reflect.Slice, reflect.Array:
		s.Items = p.member(s.Items, t.Elem())
	case reflect.Map:
		s.AdditionalProperties = p.member(s.AdditionalProperties, t.Elem())
		for k, v := range s.PatternProperties {
			s.PatternProperties[k] = p.member(v, t.Elem())
		}
	}
}

// member walks s, the schema of a member of Go type t, and returns it
// accepting null when t is nullable.
func (p *nullPass) member(s *ij.Schema, t reflect.Type) *ij.Schema {
	if s == nil {
		return nil
	}
	p.walk(s, t)
	if !nullable(t) || (s.Ref == "" && s.Type == "") { // an empty schema takes null already
		return s
	}
	return &ij.Schema{AnyOf: []*ij.Schema{s, {Type: "null"}}}
}

// jsonFields maps the member names encoding/json writes t's fields under
// to their types: its exported fields and those of embedded structs
// (promoted), renamed by their json tags, without those tagged "-". The
// shallower of two fields of one name wins, as in encoding/json; a field
// this misses keeps invopop's schema (which refuses null).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	depth := map[string]int{}
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				continue // its fields are promoted: VisibleFields lists them
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if d, seen := depth[name]; !seen || len(f.Index) < d {
			out[name], depth[name] = f.Type, len(f.Index)
		}
	}
	return out
}

// compileSignalSchema compiles a declared payload schema, loading nothing
// from outside it.
func compileSignalSchema(schema json.RawMessage) (*sj.Schema, error) {
	doc, err := sj.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, errors.Wrap(err, "schema is not JSON")
	}
	c := sj.NewCompiler()
	c.DefaultDraft(sj.Draft2020)
	c.UseLoader(refuseLoader{})
	const url = "urn:cairn:signal-payload"
	if err := c.AddResource(url, doc); err != nil {
		return nil, errors.Wrap(err, "schema")
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, errors.Wrap(err, "schema does not compile")
	}
	return compiled, nil
}

// refuseLoader is a compiler's loader that loads nothing: a declared
// schema refers only within itself, and a client reading one from the
// registry must not fetch URLs a worker wrote.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, errors.Newf("schema refers to %s: a signal's schema may refer only within itself", url)
}

// SignalNotDeclaredError is the error of a signal whose name the task's
// type does not declare, when the type declares the signals it receives
// ([WorkflowOpts.Signals]): nothing was written. It is marked
// [ErrInvalid]; the HTTP API answers it 404 signal_not_declared.
type SignalNotDeclaredError struct {
	TaskID   uuid.UUID
	Type     string
	Version  int
	Name     string
	Declared []string // the names the type declares, sorted
}

func (e *SignalNotDeclaredError) Error() string {
	declared := "none"
	if len(e.Declared) > 0 {
		q := make([]string, len(e.Declared))
		for i, n := range e.Declared {
			q[i] = strconv.Quote(n)
		}
		declared = strings.Join(q, ", ")
	}
	return fmt.Sprintf("signal %q to task %s: its type %s@%d does not declare a signal of that name (it declares: %s)",
		e.Name, e.TaskID, e.Type, e.Version, declared)
}

// SignalPayloadError is the error of a signal whose payload does not fit
// the schema the task's type declares for it: nothing was written. It is
// marked [ErrInvalid]; the HTTP API answers it 422
// invalid_signal_payload.
type SignalPayloadError struct {
	TaskID   uuid.UUID
	Type     string
	Version  int
	Name     string
	Problems []SignalPayloadProblem // at least one
}

// SignalPayloadProblem is one thing wrong with a signal's payload.
type SignalPayloadProblem struct {
	// Pointer locates it in the payload: a JSON Pointer (RFC 6901), ""
	// for the payload itself, "/approved" for its member approved.
	Pointer string `json:"pointer"`
	// Detail says what is wrong there: "missing", "got string, want
	// boolean".
	Detail string `json:"detail"`
}

func (p SignalPayloadProblem) String() string {
	if p.Pointer == "" {
		return "payload: " + p.Detail
	}
	return p.Pointer + ": " + p.Detail
}

func (e *SignalPayloadError) Error() string {
	q := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		q[i] = p.String()
	}
	return fmt.Sprintf("signal %q to task %s: the payload does not fit what its type %s@%d declares: %s",
		e.Name, e.TaskID, e.Type, e.Version, strings.Join(q, "; "))
}

// maxPayloadProblems bounds the problems a SignalPayloadError lists.
const maxPayloadProblems = 20

// payloadProblems validates payload (JSON; empty for none, validated as
// null) against schema and lists what is wrong, nil when nothing is.
func payloadProblems(schema *sj.Schema, payload json.RawMessage) ([]SignalPayloadProblem, error) {
	text := bytes.TrimSpace(payload)
	if len(text) == 0 {
		text = []byte("null")
	}
	inst, err := sj.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		return nil, errors.Wrap(err, "decode payload")
	}
	err = schema.Validate(inst)
	if err == nil {
		return nil, nil
	}
	var ve *sj.ValidationError
	if !errors.As(err, &ve) {
		return nil, errors.Wrap(err, "validate payload")
	}
	var out []SignalPayloadProblem
	collectProblems(ve, &out)
	if len(out) == 0 { // no leaf said why
		out = append(out, SignalPayloadProblem{Pointer: pointer(ve.InstanceLocation), Detail: "does not fit the declared schema"})
	}
	slices.SortStableFunc(out, func(a, b SignalPayloadProblem) int { return strings.Compare(a.Pointer, b.Pointer) })
	out = slices.Compact(out)
	if len(out) > maxPayloadProblems {
		out = out[:maxPayloadProblems]
	}
	return out, nil
}

// collectProblems adds the leaves of a validation error to out: a
// missing property is reported at its own location ("/approved:
// missing"), and of an anyOf that null would have satisfied, the
// other branches' reasons only.
func collectProblems(ve *sj.ValidationError, out *[]SignalPayloadProblem) {
	causes := ve.Causes
	if _, ok := ve.ErrorKind.(*kind.AnyOf); ok && len(causes) > 1 {
		causes = slices.DeleteFunc(slices.Clone(causes), func(c *sj.ValidationError) bool {
			t, ok := c.ErrorKind.(*kind.Type)
			return ok && len(c.Causes) == 0 && slices.Equal(t.Want, []string{"null"})
		})
	}
	if len(causes) > 0 {
		for _, c := range causes {
			collectProblems(c, out)
		}
		return
	}
	at := pointer(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, SignalPayloadProblem{Pointer: at + "/" + escapePointer(m), Detail: "missing"})
		}
	case *kind.FalseSchema:
		*out = append(*out, SignalPayloadProblem{Pointer: at, Detail: "not allowed"})
	default:
		*out = append(*out, SignalPayloadProblem{Pointer: at, Detail: ve.ErrorKind.LocalizedString(message.NewPrinter(language.English))})
	}
}

// pointer is the JSON Pointer of an instance location.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}
