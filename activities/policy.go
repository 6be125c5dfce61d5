package activities

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/celenv"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrBadPolicy marks an error from [NewPolicy]: the expression does not
// parse, does not type-check, returns the wrong type, or may cost too much.
var ErrBadPolicy = errors.New("bad classification policy")

// Limits on what a policy sees and spends. A policy runs on every failure of
// its steps, so its worst case is bounded before it is accepted: the
// estimate of its cost over inputs at these sizes must stay under
// PolicyCostLimit, and evaluation stops at that cost too.
const (
	// PolicyCostLimit is the most a policy may cost, in CEL cost units
	// (roughly, one per operation; string operations per character).
	PolicyCostLimit = 100_000
	// policyMessageMax is the longest error message a policy sees; longer
	// messages are cut (the history keeps the whole message).
	policyMessageMax = 4096
	// policyAttrsMax and policyAttrMax bound error.attrs as a policy sees
	// it: at most this many entries, each key and value at most this long.
	policyAttrsMax = 32
	policyAttrMax  = 256
	policyNameMax  = 200
)

// PolicyError is the error a policy sees as `error`.
type PolicyError struct {
	Message string            `cel:"message"`
	Kind    string            `cel:"kind"`
	Status  int               `cel:"status"`
	Attrs   map[string]string `cel:"attrs"`
}

// PolicyTask is the task a policy sees as `task`.
type PolicyTask struct {
	Type  string `cel:"type"`
	Queue string `cel:"queue"`
}

// PolicyStep is the step a policy sees as `step`; Name is empty when the
// workflow body failed outside any step.
type PolicyStep struct {
	Name string `cel:"name"`
}

// PolicyInput is everything a policy is evaluated over.
type PolicyInput struct {
	Error   PolicyError
	Attempt int           // attempts of the failing step so far, this one included: 1 for its first
	Elapsed time.Duration // since the step's first attempt
	Task    PolicyTask
	Step    PolicyStep
}

// Policy is a compiled CEL expression that classifies errors not marked in
// Go code. It sees:
//
//	error.message  string   the error's message
//	error.kind     string   the kind the code set (see [KindError]), else the Go type
//	error.status   int      a status code (see [StatusError]), 0 if none
//	error.attrs    map(string, string)  attributes (see [WithAttrs])
//	attempt        int      the failing step's attempts so far, from 1 (per step, like elapsed)
//	elapsed        duration since the step's first attempt
//	task.type, task.queue, step.name   strings
//
// and returns a bool (true: transient, worth retrying) or the string
// "transient" or "permanent". For example:
//
//	error.status == 429 || error.status >= 500
//	error.kind == "timeout" && elapsed < duration("10m") ? "transient" : "permanent"
//
// A Policy is safe for concurrent use.
type Policy struct {
	name, expr string
	prg        cel.Program
}

// Name is the policy's name, as recorded in the evidence of the errors it
// classifies.
func (p *Policy) Name() string { return p.name }

// Expression is the policy's CEL source.
func (p *Policy) Expression() string { return p.expr }

var (
	policyEnvOnce sync.Once
	policyEnv     *cel.Env
	policyEnvErr  error
)

func newPolicyEnv() (*cel.Env, error) {
	policyEnvOnce.Do(func() {
		policyEnv, policyEnvErr = celenv.New(
			ext.NativeTypes(reflect.TypeFor[PolicyError](), reflect.TypeFor[PolicyTask](), reflect.TypeFor[PolicyStep](),
				ext.ParseStructTags(true)),
			celenv.Strings(),
			cel.Variable("error", cel.ObjectType("activities.PolicyError")),
			cel.Variable("attempt", cel.IntType),
			cel.Variable("elapsed", cel.DurationType),
			cel.Variable("task", cel.ObjectType("activities.PolicyTask")),
			cel.Variable("step", cel.ObjectType("activities.PolicyStep")),
		)
	})
	return policyEnv, policyEnvErr
}

// NewPolicy compiles expr as the classification policy called name. The
// error, marked [ErrBadPolicy], names the policy and says what is wrong and
// where (line:column). Compile policies at start-up, when workflows are
// defined (see [MustPolicy]), so a bad one stops the program there and not
// at the first failure.
func NewPolicy(name, expr string) (*Policy, error) {
	if name == "" || len(name) > policyNameMax || strings.ContainsAny(name, "\x00\n") {
		return nil, errmark.Mark(errors.Newf("policy %q: name must be 1 to %d characters on one line", name, policyNameMax), ErrBadPolicy)
	}
	env, err := newPolicyEnv()
	if err != nil {
		return nil, errors.Wrap(err, "policy environment")
	}
	bad := func(format string, args ...any) error {
		return errmark.Mark(errors.Newf("policy %q: "+format, append([]any{name}, args...)...), ErrBadPolicy)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, bad("%s", celIssues(iss.Err()))
	}
	switch out := ast.OutputType(); {
	case out.IsExactType(cel.BoolType), out.IsExactType(cel.StringType), out.IsExactType(cel.DynType):
	default:
		return nil, bad("returns %s; it must return a bool (true: transient) or \"transient\" / \"permanent\"", out)
	}
	est, err := env.EstimateCost(ast, policySizes{})
	if err != nil {
		return nil, bad("cannot estimate cost: %v", err)
	}
	if est.Max > PolicyCostLimit {
		return nil, bad("may cost up to %d, over the limit of %d: simplify it (avoid nested comprehensions and repeated regular expressions)", est.Max, PolicyCostLimit)
	}
	prg, err := env.Program(ast, celenv.ProgramOptions(PolicyCostLimit)...)
	if err != nil {
		return nil, bad("%v", err)
	}
	return &Policy{name: name, expr: expr, prg: prg}, nil
}

// MustPolicy is [NewPolicy] that panics on a bad policy: for package-level
// variables, compiled as the program starts.
func MustPolicy(name, expr string) *Policy {
	p, err := NewPolicy(name, expr)
	if err != nil {
		panic(err)
	}
	return p
}

// policyTimeout bounds one evaluation of a policy in time, behind the cost
// limit, for what cost counts poorly (compiling a regular expression).
// Tests shorten it.
var policyTimeout = time.Second

// Classify evaluates the policy over in. An evaluation error (a missing map
// key, a cost over [PolicyCostLimit], an evaluation longer than a second,
// a result that is neither a bool nor "transient" /
// "permanent") is returned; callers count it as permanent.
func (p *Policy) Classify(in PolicyInput) (history.Class, error) {
	// Not the attempt's context: a failure is classified also when that
	// context has ended (a timeout is a failure to classify).
	ctx, cancel := context.WithTimeout(context.Background(), policyTimeout)
	defer cancel()
	out, _, err := celenv.Eval(ctx, p.prg, map[string]any{
		"error":   boundedPolicyError(in.Error),
		"attempt": in.Attempt,
		"elapsed": in.Elapsed,
		// Cut to the sizes the cost estimate assumed (policySizes), like
		// the error: a longer step name would let a policy accepted as
		// cheap run over the cost limit.
		"task": PolicyTask{Type: truncate(in.Task.Type, policyAttrMax), Queue: truncate(in.Task.Queue, policyAttrMax)},
		"step": PolicyStep{Name: truncate(in.Step.Name, policyAttrMax)},
	})
	if err != nil {
		return history.Permanent, errors.Wrapf(err, "policy %q", p.name)
	}
	return policyClass(p.name, out)
}

func policyClass(name string, out ref.Val) (history.Class, error) {
	switch v := out.(type) {
	case types.Bool:
		if v {
			return history.Transient, nil
		}
		return history.Permanent, nil
	case types.String:
		switch history.Class(v) {
		case history.Transient, history.Permanent:
			return history.Class(v), nil
		}
		return history.Permanent, errors.Newf("policy %q returned %q; want \"transient\" or \"permanent\"", name, string(v))
	}
	return history.Permanent, errors.Newf("policy %q returned a %s; want a bool or \"transient\" / \"permanent\"", name, out.Type())
}

// boundedPolicyError cuts the error to the sizes the cost estimate assumed.
func boundedPolicyError(e PolicyError) PolicyError {
	e.Message = truncate(e.Message, policyMessageMax)
	e.Kind = truncate(e.Kind, policyAttrMax)
	if len(e.Attrs) == 0 {
		return e
	}
	attrs := make(map[string]string, min(len(e.Attrs), policyAttrsMax))
	for k, v := range e.Attrs {
		if len(attrs) == policyAttrsMax {
			break
		}
		attrs[truncate(k, policyAttrMax)] = truncate(v, policyAttrMax)
	}
	e.Attrs = attrs
	return e
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !runeStart(s[n]) {
		n--
	}
	return s[:n]
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }

// policySizes tells the cost estimator how large a policy's inputs can be,
// as boundedPolicyError makes them.
type policySizes struct{}

func (policySizes) EstimateSize(node cost.AstNode) *cost.SizeEstimate {
	var size uint64
	switch strings.Join(node.Path(), ".") {
	case "error.message":
		size = policyMessageMax
	case "error.kind", "error.attrs.@keys", "error.attrs.@values", "task.type", "task.queue", "step.name":
		size = policyAttrMax
	case "error.attrs":
		size = policyAttrsMax
	default:
		return nil
	}
	return &cost.SizeEstimate{Min: 0, Max: size}
}

func (policySizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// String describes the policy for logs.
func (p *Policy) String() string { return fmt.Sprintf("policy %q: %s", p.name, p.expr) }

// celIssues formats CEL's compile errors: "line:column: what", with the
// source line and a caret under the spot.
func celIssues(err error) string {
	msg := strings.ReplaceAll(err.Error(), "ERROR: <input>:", "")
	return strings.ReplaceAll(msg, "<input>:", "")
}
