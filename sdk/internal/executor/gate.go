package executor

import (
	"context"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// gate is one check a new step passes before it runs (see
// [interpreter.RunParams.Gate]): a budget reserves what the step declares
// it may spend, a model rate limit waits for the step's turn. settle, if
// not nil, is called once the step has run with the usage it reported
// and its error, or, when a later gate refused the step, with no usage
// and that refusal, so it gives back what it took.
type gate func(ctx context.Context, a *edge.Attempt, step interpreter.StepInfo, spend *history.Spend) (settle func(usage []history.Usage, stepErr error) error, err error)

// stepGate composes gates for an attempt's run, asked in order: nil when
// there are none, so a run without them pays nothing.
func stepGate(a *edge.Attempt, gates []gate) func(context.Context, interpreter.StepInfo, *history.Spend) (func([]history.Usage, error) error, error) {
	if len(gates) == 0 {
		return nil
	}
	return func(ctx context.Context, step interpreter.StepInfo, spend *history.Spend) (func([]history.Usage, error) error, error) {
		var settles []func([]history.Usage, error) error
		settleAll := func(usage []history.Usage, stepErr error) error {
			var first error
			for i := len(settles) - 1; i >= 0; i-- {
				if err := settles[i](usage, stepErr); err != nil && first == nil {
					first = err
				}
			}
			return first
		}
		for _, g := range gates {
			settle, err := g(ctx, a, step, spend)
			if err != nil {
				_ = settleAll(nil, errmark.Mark(err, errStepNotRun)) // what earlier gates took goes back; the refusal is the error
				return nil, err
			}
			if settle != nil {
				settles = append(settles, settle)
			}
		}
		if len(settles) == 0 {
			return nil, nil
		}
		return settleAll, nil
	}
}
