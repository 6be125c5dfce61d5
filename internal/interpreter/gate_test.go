package interpreter_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
)

// A gate sees each new step with the spend it declares, and settles it
// with the usage the step reported; a step on record is not gated.
func TestRunGateSeesSpendAndSettlesUsage(t *testing.T) {
	t.Parallel()
	b := setup(t, recordedStep(t, 0, "cached", "old"))
	type settled struct {
		step  string
		usage []history.Usage
		err   error
	}
	var asked []*history.Spend
	var done []settled
	b.params.Gate = func(_ context.Context, s interpreter.StepInfo, spend *history.Spend) (func([]history.Usage, error) error, error) {
		asked = append(asked, spend)
		return func(u []history.Usage, err error) error {
			done = append(done, settled{s.Name, u, err})
			return nil
		}, nil
	}
	spend := &workflow.Spend{Model: "m", Tokens: 100, CostUSD: 0.01}
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(ctx, "cached", mustNotRun[string](t, "cached"), nil); err != nil {
			return nil, err
		}
		_, err := workflow.Step(ctx, "llm", func(ctx context.Context) (int, error) {
			activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: 60, OutputTokens: 30, CostUSD: 0.009})
			return 1, nil
		}, &workflow.StepOpts{Spend: spend})
		if err != nil {
			return nil, err
		}
		_, err = workflow.Step(ctx, "plain", func(context.Context) (int, error) { return 2, nil }, nil)
		return nil, err
	}, nil)
	require.NoError(t, res.Err)
	require.Equal(t, []*history.Spend{spend, nil}, asked)
	require.Equal(t, []settled{
		{"llm", []history.Usage{{Model: "m", InputTokens: 60, OutputTokens: 30, CostUSD: 0.009}}, nil},
		{"plain", nil, nil},
	}, done)
}

// A refusal ends the run before the step runs, with the gate's error
// and the step named; a settle that fails ends it as a failed record.
func TestRunGateRefusesAndSettleFails(t *testing.T) {
	t.Parallel()
	refusal := activities.Permanent(errors.New("over budget"))
	b := setup(t)
	b.params.Gate = func(_ context.Context, s interpreter.StepInfo, _ *history.Spend) (func([]history.Usage, error) error, error) {
		return nil, refusal
	}
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "llm", mustNotRun[int](t, "llm"), &workflow.StepOpts{Spend: &workflow.Spend{Tokens: 5}})
		return nil, err
	}, nil)
	require.ErrorIs(t, res.Err, refusal)
	require.NotNil(t, res.Step)
	require.Equal(t, "llm", res.Step.Name)
	require.Equal(t, 1, res.Executed)

	b = setup(t)
	b.params.Gate = func(context.Context, interpreter.StepInfo, *history.Spend) (func([]history.Usage, error) error, error) {
		return func([]history.Usage, error) error { return errors.New("database gone") }, nil
	}
	res = interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "llm", func(context.Context) (int, error) { return 1, nil }, nil)
		return nil, err
	}, nil)
	require.ErrorIs(t, res.Err, interpreter.ErrRecordFailed)
	require.ErrorContains(t, res.Err, "settle its spend")
}

// A spend that declares something impossible is a bad step option.
func TestRunRefusesBadSpend(t *testing.T) {
	t.Parallel()
	for _, bad := range []workflow.Spend{{Tokens: -1}, {CostUSD: -0.5}, {}} {
		b := setup(t)
		res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			_, err := workflow.Step(ctx, "llm", mustNotRun[int](t, "llm"), &workflow.StepOpts{Spend: &bad})
			return nil, err
		}, nil)
		require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts, "%+v", bad)
	}
}
