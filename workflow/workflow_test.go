package workflow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// runSteps runs body as a workflow over the recorded steps, recording
// nothing, the way a worker's attempt would.
func runSteps(t *testing.T, steps []history.Step, body func(workflow.Context) error) interpreter.Result {
	t.Helper()
	return interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Steps: steps, Context: context.Background(),
		Record: func(history.Payload) error { return nil },
	}, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		return nil, body(ctx)
	}, nil)
}

// Every StepOpts field reaches the interpreter, which hands the options of
// a failed step and of the recorded steps to the worker (retry override,
// compensator, its retry policy and timeouts).
func TestStepOptsReachTheInterpreter(t *testing.T) {
	t.Parallel()
	retry := &activities.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute}
	compRetry := &activities.RetryPolicy{MaxAttempts: 7, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Minute}
	var undone json.RawMessage
	opts := workflow.StepOpts{
		Retry: retry, StartToClose: time.Minute, HeartbeatTimeout: time.Second, CompensationRetry: compRetry,
		Compensate: func(_ context.Context, out json.RawMessage) error { undone = out; return nil },
	}
	errModel := errors.New("model overloaded")
	res := runSteps(t, []history.Step{{Position: 0, Name: "reserve", Output: json.RawMessage(`"r-1"`)}}, func(ctx workflow.Context) error {
		if _, err := workflow.Step(ctx, "reserve", func(context.Context) (string, error) { return "unused", nil }, &opts); err != nil {
			return err
		}
		_, err := workflow.Step(ctx, "extract", func(context.Context) (string, error) { return "", errModel }, &opts)
		return err
	})
	require.True(t, errors.Is(res.Err, errModel), "got %v", res.Err)
	for _, got := range []*interpreter.StepOptions{res.StepOptions, res.Visited[0]} {
		require.NotNil(t, got)
		require.Equal(t, *retry, *got.Retry, "a whole policy reaches it as it is")
		require.Equal(t, *compRetry, *got.CompensationRetry)
		require.Equal(t, activity.Timeouts{StartToClose: time.Minute, Heartbeat: time.Second}, got.Timeouts)
		require.False(t, got.Irreversible)
		require.NotNil(t, got.Compensate)
	}
	require.NoError(t, res.Visited[0].Compensate(context.Background(), json.RawMessage(`"r-1"`)))
	require.JSONEq(t, `"r-1"`, string(undone), "the compensator is the one the step was given")
}

func TestNilStepOptsAreTheDefaults(t *testing.T) {
	t.Parallel()
	var info interpreter.StepInfo
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Context: context.Background(),
		Record: func(history.Payload) error { return nil },
		StepContext: func(i interpreter.StepInfo) context.Context {
			info = i
			return context.Background()
		},
	}, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) { return "", errors.New("blurred") }, nil)
		return nil, err
	}, nil)
	require.Error(t, res.Err)
	require.Nil(t, res.StepOptions, "nil StepOpts stay nil: every default")
	require.Equal(t, interpreter.StepInfo{Position: 0, Name: "ocr"}, info)
}

func TestIrreversibleStepOptsReachTheStepContext(t *testing.T) {
	t.Parallel()
	var info interpreter.StepInfo
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Context: context.Background(),
		Record: func(history.Payload) error { return nil },
		StepContext: func(i interpreter.StepInfo) context.Context {
			info = i
			return context.Background()
		},
	}, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "wire", func(context.Context) (int, error) { return 1, nil }, &workflow.StepOpts{Irreversible: true})
		return nil, err
	}, nil)
	require.NoError(t, res.Err)
	require.True(t, info.Irreversible)
}

// Timeouts on an irreversible step are a bad step option: permanent.
func TestIrreversibleStepWithTimeoutIsBadStepOpts(t *testing.T) {
	t.Parallel()
	res := runSteps(t, nil, func(ctx workflow.Context) error {
		_, err := workflow.Step(ctx, "wire", func(context.Context) (int, error) {
			t.Error("the step must not run with bad options")
			return 1, nil
		}, &workflow.StepOpts{Irreversible: true, StartToClose: time.Second})
		return err
	})
	require.True(t, errors.Is(res.Err, interpreter.ErrBadStepOpts), "got %v", res.Err)
	require.Contains(t, res.Err.Error(), "irreversible")
}

func TestCompensateDecodesTheStepOutput(t *testing.T) {
	t.Parallel()
	var got struct{ ID string }
	undo := workflow.Compensate(func(_ context.Context, out struct{ ID string }) error {
		got = out
		return nil
	})
	require.NoError(t, undo(context.Background(), json.RawMessage(`{"ID": "r-1"}`)))
	require.Equal(t, "r-1", got.ID)

	err := undo(context.Background(), json.RawMessage(`"not an object"`))
	require.Error(t, err)
	require.True(t, errors.Is(err, activities.ErrPermanent), "an output the compensator cannot read will not get readable: %v", err)
}

func TestSleepEndsTheRunWithATimer(t *testing.T) {
	t.Parallel()
	res := runSteps(t, nil, func(ctx workflow.Context) error { return workflow.Sleep(ctx, time.Hour) })
	var sleep *interpreter.SleepRequest
	require.True(t, errors.As(res.Err, &sleep), "got %v", res.Err)
	require.Equal(t, 0, sleep.Position)
}

func TestErrNondeterministicIsTheInterpretersMark(t *testing.T) {
	t.Parallel()
	res := runSteps(t, []history.Step{{Position: 0, Name: "ocr"}}, func(ctx workflow.Context) error {
		_, err := workflow.Step(ctx, "fetch", func(context.Context) (int, error) { return 0, nil }, nil)
		return err
	})
	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "got %v", res.Err)
}

// A workflow body cannot hand its Context to I/O: it is not a
// context.Context. Its own methods say which task and attempt it runs.
func TestContextIsNotAContextContext(t *testing.T) {
	t.Parallel()
	var isStdContext bool
	var taskID string
	var attempt int
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-7", Attempt: 3, Record: func(history.Payload) error { return nil },
	}, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, isStdContext = any(ctx).(context.Context)
		taskID, attempt = ctx.TaskID(), ctx.Attempt()
		return nil, nil
	}, nil)
	require.NoError(t, res.Err)
	require.False(t, isStdContext, "workflow.Context must not satisfy context.Context")
	require.Equal(t, "task-7", taskID)
	require.Equal(t, 3, attempt)
}

// Map over recorded steps returns their recorded outputs in item order
// without running any.
func TestMapReplaysRecordedItems(t *testing.T) {
	t.Parallel()
	var steps []history.Step
	for i, text := range []string{`"zero"`, `"one"`, `"two"`} {
		steps = append(steps, history.Step{Position: i, Name: "ocr", Output: json.RawMessage(text)})
	}
	var got []string
	res := runSteps(t, steps, func(ctx workflow.Context) error {
		var err error
		got, err = workflow.Map(ctx, "ocr", []int{0, 1, 2}, func(context.Context, int) (string, error) {
			return "", errors.New("a recorded item must not run")
		}, &workflow.MapOpts{Concurrency: 2})
		return err
	})
	require.NoError(t, res.Err)
	require.Equal(t, []string{"zero", "one", "two"}, got)
	require.Zero(t, res.Executed)
}
