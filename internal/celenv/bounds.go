package celenv

import (
	"context"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrCostLimit marks an error from [Eval]: the evaluation went over the
// cost limit its program was made with ([ProgramOptions]).
var ErrCostLimit = errors.New("cel: cost limit exceeded")

// InterruptCheckFrequency is how many comprehension iterations a program
// runs between looks at its context: a cancelled or expired context stops
// an evaluation within that many iterations (a single function call, such
// as one regular-expression match, is not interrupted).
const InterruptCheckFrequency = 100

// ProgramOptions are the options every cairn program is made with: it stops
// once its cost goes over costLimit, and [Eval] stops it when its context
// is done.
func ProgramOptions(costLimit uint64) []cel.ProgramOption {
	return []cel.ProgramOption{
		cel.CostLimit(costLimit),
		cel.InterruptCheckFrequency(InterruptCheckFrequency),
		cel.EvalOptions(cel.OptOptimize),
	}
}

// Strings is cel-go's strings extension (ext.Strings) with a cost for
// format by the size of what it makes. cel-go v0.33.2 charges
// "...".format(args) a tenth of the format string's length and estimates
// no result size, so nesting formats grows the output tenfold a level while
// the charge stays tiny: a 551-character filter built 10^9 characters at a
// cost of 274 per level. Here a format call costs 1, a scan of the format
// string, and one unit per character of its result (as cel-go charges the
// other string transforms, such as replace and join), and its result is
// estimated at most the format string plus every argument, so both the
// cost limit of an evaluation and the cost estimate of a policy see it.
// Every other function the extension adds has a cost model of cel-go's.
// join, replace and format also refuse, before they run, to make a
// string over [MaxStringBytes] (see builders).
func Strings() cel.EnvOption {
	return func(e *cel.Env) (*cel.Env, error) {
		e, err := ext.Strings()(e)
		if err != nil {
			return nil, err
		}
		if e, err = boundBuilders(e); err != nil {
			return nil, err
		}
		return cel.CostModel(formatCost)(e)
	}
}

// formatCost prices format by its output. A CEL format clause consumes
// one argument, so the output is at most the format string and each
// argument's formatting; a number formats to a few hundred characters at
// most (precision is capped at 100), hence the per-argument constant.
var formatCost = cost.MemberOverload("string_format",
	cost.EvalCost(cost.Sum(cost.Const(cost.CallCost), cost.StringScan(cost.Length(cost.Target())), cost.Length(cost.Result()))),
	cost.ResultSize(cost.AtMost(cost.Sum(cost.Target(), cost.ElemTotal(cost.Arg(0)), cost.Mul(cost.Length(cost.Arg(0)), cost.Const(formatArgMax))))),
)

// formatArgMax bounds what one scalar argument of format prints: a float
// of 309 digits with 100 decimals, a sign and a point.
const formatArgMax = 411

// Eval evaluates prg over vars under ctx (cel-go's ContextEval) and returns
// the result and what the evaluation cost, also when it fails. Its error
// is marked [ErrCostLimit] when the program's cost limit stopped it; when
// ctx stopped it, errors.Is finds ctx's cause (context.Canceled,
// context.DeadlineExceeded, or the cause given to context.WithCancelCause
// or context.WithTimeoutCause).
func Eval(ctx context.Context, prg cel.Program, vars any) (ref.Val, uint64, error) {
	out, det, err := prg.ContextEval(ctx, vars)
	var spent uint64
	if det != nil && det.ActualCost() != nil {
		spent = *det.ActualCost()
	}
	if err == nil {
		return out, spent, nil
	}
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return nil, spent, errmark.Mark(errors.New(cancelled.Message), ErrCostLimit)
	case ctx.Err() != nil:
		// ContextEval wraps an interrupt with the context's cause; keep
		// that cause findable however it came back.
		return nil, spent, errmark.Mark(err, context.Cause(ctx))
	}
	return nil, spent, err
}
