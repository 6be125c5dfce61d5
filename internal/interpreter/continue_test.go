package interpreter_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
)

func TestContinueAsNewEndsTheRunWithTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, n int) (int, error) {
		if _, err := workflow.Step(ctx, "poll", func(context.Context) (int, error) { return n, nil }, nil); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("next: %w", workflow.ContinueAsNew(ctx, map[string]int{"n": n + 1}))
	}), []byte(`1`))
	require.NoError(t, res.Err)
	require.Nil(t, res.Output)
	require.NotNil(t, res.Continue, "a wrapped request continues too")
	require.JSONEq(t, `{"n":2}`, string(res.Continue.Input))
	require.NotNil(t, res.Pending, "the last step comes back to be written with the end")
}

func TestContinueAsNewAfterAFailedStepIsTheFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ int) (int, error) {
		_, _ = workflow.Step(ctx, "poll", func(context.Context) (int, error) { return 0, errors.New("503") }, nil)
		return 0, workflow.ContinueAsNew(ctx, 1) // the failure ended the run already
	}), nil)
	require.ErrorContains(t, res.Err, "503")
	require.Nil(t, res.Continue)
}

func TestContinueAsNewRefusesAnInputThatDoesNotEncode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ int) (int, error) {
		return 0, workflow.ContinueAsNew(ctx, math.Inf(1))
	}), nil)
	require.ErrorIs(t, res.Err, workflow.ErrBadContinueInput)
	require.Nil(t, res.Continue)
	res = interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ int) (int, error) {
		return 0, workflow.ContinueAsNew(ctx, "a\x00b")
	}), nil)
	require.ErrorIs(t, res.Err, workflow.ErrBadContinueInput)
	require.ErrorContains(t, res.Err, "U+0000")
}

func TestContinueAsNewBeforeRecordedStepsIsNondeterministic(t *testing.T) {
	t.Parallel()
	b := setup(t, recordedStep(t, 0, "poll", 1))
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ int) (int, error) {
		return 0, workflow.ContinueAsNew(ctx, 1)
	}), nil)
	require.ErrorIs(t, res.Err, interpreter.ErrNondeterministic)
	require.Nil(t, res.Continue)
}
