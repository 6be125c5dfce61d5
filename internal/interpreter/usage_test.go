package interpreter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestStepRecordsDurationAndUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fn := func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(ctx, "ocr", constStep(1), nil); err != nil {
			return nil, err
		}
		_, err := workflow.Step(ctx, "extract", func(ctx context.Context) (string, error) {
			activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: 100, OutputTokens: 50, CostUSD: 0.01})
			time.Sleep(20 * time.Millisecond)
			activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: 1})
			return "fields", nil
		}, &workflow.StepOpts{StartToClose: time.Minute})
		return nil, err
	}
	res := interpreter.Run(b.params, fn, nil)
	require.NoError(t, res.Err)

	recorded := b.rec.recorded()
	require.Len(t, recorded, 1)
	require.Nil(t, recorded[0].Usage, "a step that reports nothing records no usage")
	last, ok := res.Pending.(history.StepCompletedData)
	require.True(t, ok)
	require.Equal(t, "extract", last.Name)
	require.GreaterOrEqual(t, last.DurationMillis, int64(20))
	require.Equal(t, []history.Usage{{Model: "m", InputTokens: 101, OutputTokens: 50, CostUSD: 0.01}}, last.Usage)
	require.Nil(t, res.StepUsage, "no step failed")
}

// A failed model call is paid for: the failing step's usage comes back for
// the attempt_failed event.
func TestFailedStepReturnsItsUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fn := func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "extract", func(ctx context.Context) (string, error) {
			activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: 7, CostUSD: 0.5})
			return "", errors.New("model returned garbage")
		}, nil)
		return nil, err
	}
	res := interpreter.Run(b.params, fn, nil)
	require.Error(t, res.Err)
	require.Equal(t, []history.Usage{{Model: "m", InputTokens: 7, CostUSD: 0.5}}, res.StepUsage)
}
