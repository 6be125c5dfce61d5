package interpreter_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// recorder is the in-memory Record func: it keeps what a run recorded, and
// fails with err when err is set.
type recorder struct {
	mu     sync.Mutex
	events []history.StepCompletedData
	err    error
}

func (r *recorder) record(p history.Payload) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.events = append(r.events, p.(history.StepCompletedData))
	return nil
}

func (r *recorder) recorded() []history.StepCompletedData {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]history.StepCompletedData(nil), r.events...)
}

type testBundle struct {
	rec    *recorder
	params interpreter.RunParams
}

// setup returns run params over the given recorded steps, recording new
// steps in memory.
func setup(t *testing.T, steps ...history.Step) *testBundle {
	t.Helper()
	rec := &recorder{}
	return &testBundle{rec: rec, params: interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Steps: steps, Context: context.Background(), Record: rec.record,
	}}
}

// recordedStep is a history step whose output is v encoded.
func recordedStep(t *testing.T, pos int, name string, v any) history.Step {
	t.Helper()
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return history.Step{Position: pos, Name: name, Output: out}
}

// mustNotRun is a step body that fails the test if it runs.
func mustNotRun[Out any](t *testing.T, name string) func(context.Context) (Out, error) {
	return func(context.Context) (Out, error) {
		var zero Out
		t.Errorf("step %s ran, but must not", name)
		return zero, errors.Newf("step %s must not run", name)
	}
}

func constStep[Out any](v Out) func(context.Context) (Out, error) {
	return func(context.Context) (Out, error) { return v, nil }
}

type extracted struct {
	Fields []string `json:"fields"`
	Pages  int      `json:"pages"`
}

func TestRunReplaysRecordedStepsWithoutRunningThem(t *testing.T) {
	t.Parallel()
	b := setup(t,
		recordedStep(t, 0, "ocr", "the text"),
		recordedStep(t, 1, "extract", extracted{Fields: []string{"name", "total"}, Pages: 3}),
	)
	var gotText string
	var gotFields extracted
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ struct{}) (string, error) {
		var err error
		gotText, err = workflow.Step(ctx, "ocr", mustNotRun[string](t, "ocr"), nil)
		if err != nil {
			return "", err
		}
		gotFields, err = workflow.Step(ctx, "extract", mustNotRun[extracted](t, "extract"), nil)
		if err != nil {
			return "", err
		}
		return workflow.Step(ctx, "validate", constStep("valid"), nil)
	}), nil)

	require.NoError(t, res.Err)
	require.Equal(t, "the text", gotText)
	require.Equal(t, extracted{Fields: []string{"name", "total"}, Pages: 3}, gotFields)
	require.JSONEq(t, `"valid"`, string(res.Output))
	require.Equal(t, 1, res.Executed, "only the new step executes")
	require.Nil(t, res.Step)
	rec := written(b.rec, res)
	require.Len(t, rec, 1, "replayed steps are not recorded again")
	require.Equal(t, 2, rec[0].Position)
	require.Equal(t, "validate", rec[0].Name)
	require.JSONEq(t, `"valid"`, string(rec[0].Output))
}

func TestRunRecordsNewStepsAtIncreasingPositions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type stepCtxKey struct{}
	var infos []interpreter.StepInfo
	b.params.StepContext = func(info interpreter.StepInfo) context.Context {
		infos = append(infos, info)
		return context.WithValue(context.Background(), stepCtxKey{}, info)
	}
	var seen []interpreter.StepInfo
	step := func(ctx context.Context) (int, error) {
		info, ok := ctx.Value(stepCtxKey{}).(interpreter.StepInfo)
		if !ok {
			return 0, errors.New("step did not get the context StepContext made")
		}
		seen = append(seen, info)
		return info.Position * 10, nil
	}
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, in int) ([]int, error) {
		require.Equal(t, "task-1", ctx.TaskID())
		require.Equal(t, 1, ctx.Attempt())
		var outs []int
		for _, name := range []string{"a", "b", "c"} {
			out, err := workflow.Step(ctx, name, step, nil)
			if err != nil {
				return nil, err
			}
			outs = append(outs, out+in)
		}
		return outs, nil
	}), json.RawMessage(`1`))

	require.NoError(t, res.Err)
	require.JSONEq(t, `[1, 11, 21]`, string(res.Output))
	require.Equal(t, 3, res.Executed)
	want := []interpreter.StepInfo{{Position: 0, Name: "a"}, {Position: 1, Name: "b"}, {Position: 2, Name: "c"}}
	require.Equal(t, want, infos)
	require.Equal(t, want, seen)
	require.Equal(t, []history.StepCompletedData{
		{Position: 0, Name: "a", Output: json.RawMessage(`0`)},
		{Position: 1, Name: "b", Output: json.RawMessage(`10`)},
		{Position: 2, Name: "c", Output: json.RawMessage(`20`)},
	}, written(b.rec, res))
}

func TestRunStepContextDefaultsToRunContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type key struct{}
	b.params.Context = context.WithValue(context.Background(), key{}, "attempt ctx")
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		v, err := workflow.Step(ctx, "a", func(ctx context.Context) (string, error) {
			s, _ := ctx.Value(key{}).(string)
			return s, nil
		}, nil)
		require.Equal(t, "attempt ctx", v)
		return nil, err
	}, nil)
	require.NoError(t, res.Err)
}

func TestRunRenamedStepIsNondeterministic(t *testing.T) {
	t.Parallel()
	b := setup(t,
		recordedStep(t, 0, "ocr", "text"),
		recordedStep(t, 1, "extract", "fields"),
	)
	var laterErr error
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(ctx, "ocr", mustNotRun[string](t, "ocr"), nil); err != nil {
			return nil, err
		}
		_, err := workflow.Step(ctx, "extract-v2", mustNotRun[string](t, "extract-v2"), nil)
		require.Error(t, err)
		// The body ignores the error and goes on: nothing more runs.
		_, laterErr = workflow.Step(ctx, "validate", mustNotRun[string](t, "validate"), nil)
		return json.RawMessage(`"done"`), nil
	}, nil)

	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "got %v", res.Err)
	msg := res.Err.Error()
	require.Contains(t, msg, "step 1")
	require.Contains(t, msg, `"extract"`)
	require.Contains(t, msg, `"extract-v2"`)
	require.Contains(t, strings.Join(errors.GetAllHints(res.Err), "\n"), "side effects")
	require.Same(t, res.Err, laterErr, "later steps return the error that ended the run")
	require.Nil(t, res.Output)
	require.Nil(t, res.Step, "a non-determinism error is not a step's error")
	require.Zero(t, res.Executed)
	require.Empty(t, b.rec.recorded())
}

func TestRunNondeterministicAtFirstNewPosition(t *testing.T) {
	t.Parallel()
	// A mismatch right at position 0 names it.
	b := setup(t, recordedStep(t, 0, "ocr", "text"))
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "fetch", mustNotRun[string](t, "fetch"), nil)
		return nil, err
	}, nil)
	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "got %v", res.Err)
	require.Contains(t, res.Err.Error(), "step 0")
	require.Contains(t, res.Err.Error(), `"ocr"`)
	require.Contains(t, res.Err.Error(), `"fetch"`)
}

func TestRunHistoryWithMoreStepsIsNondeterministic(t *testing.T) {
	t.Parallel()
	b := setup(t,
		recordedStep(t, 0, "ocr", "text"),
		recordedStep(t, 1, "extract", "fields"),
		recordedStep(t, 2, "validate", true),
	)
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ struct{}) (string, error) {
		return workflow.Step(ctx, "ocr", mustNotRun[string](t, "ocr"), nil)
	}), nil)
	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "got %v", res.Err)
	require.Contains(t, res.Err.Error(), "step 1")
	require.Contains(t, res.Err.Error(), `"extract"`)
	require.Nil(t, res.Output, "a run that does not match its history has no output")
	require.Empty(t, b.rec.recorded())
}

func TestRunUndecodableRecordedOutputIsNondeterministic(t *testing.T) {
	t.Parallel()
	// The step's output type changed since the history was recorded.
	b := setup(t, recordedStep(t, 0, "count", "not a number"))
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "count", mustNotRun[int](t, "count"), nil)
		return nil, err
	}, nil)
	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "got %v", res.Err)
	require.Contains(t, res.Err.Error(), "count")
}

func TestRunStepErrorEndsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errLLM := errors.New("llm 503")
	var extractErr, validateErr error
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.Step(ctx, "ocr", constStep("text"), nil); err != nil {
			return "", err
		}
		_, extractErr = workflow.Step(ctx, "extract", func(context.Context) (string, error) {
			return "", errors.Wrap(errLLM, "call model")
		}, nil)
		// A body that swallows the error cannot go on.
		_, validateErr = workflow.Step(ctx, "validate", mustNotRun[bool](t, "validate"), nil)
		return "swallowed", nil
	}), nil)

	require.True(t, errors.Is(res.Err, errLLM), "got %v", res.Err)
	require.True(t, errors.Is(extractErr, errLLM), "got %v", extractErr)
	require.Same(t, extractErr, validateErr, "later Step calls return the same error")
	require.Same(t, extractErr, res.Err)
	require.Equal(t, &interpreter.StepInfo{Position: 1, Name: "extract"}, res.Step)
	require.Equal(t, "step 1 (extract)", res.Step.String())
	require.Nil(t, res.Output)
	require.Equal(t, 2, res.Executed, "ocr and extract executed; validate did not")
	rec := written(b.rec, res)
	require.Len(t, rec, 1, "a failed step is not recorded")
	require.Equal(t, "ocr", rec[0].Name)
}

func TestRunBodyErrorEndsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errRefused := errors.New("document refused")
	res := interpreter.Run(b.params, interpreter.Typed(func(ctx workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.Step(ctx, "ocr", constStep("text"), nil); err != nil {
			return "", err
		}
		return "", errRefused
	}), nil)
	require.True(t, errors.Is(res.Err, errRefused), "got %v", res.Err)
	require.Nil(t, res.Step, "the body's own error is not a step's")
	require.Equal(t, 1, res.Executed)
}

func TestRunStoppingStopsAtNextNewStep(t *testing.T) {
	t.Parallel()
	b := setup(t, recordedStep(t, 0, "ocr", "text"))
	stopping := make(chan struct{})
	close(stopping)
	b.params.Stopping = stopping
	var replayed string
	var laterErr error
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		var err error
		// Replayed steps still replay while stopping: they run nothing.
		replayed, err = workflow.Step(ctx, "ocr", mustNotRun[string](t, "ocr"), nil)
		if err != nil {
			return nil, err
		}
		_, err = workflow.Step(ctx, "extract", mustNotRun[string](t, "extract"), nil)
		require.True(t, errors.Is(err, interpreter.ErrStopping), "got %v", err)
		_, laterErr = workflow.Step(ctx, "validate", mustNotRun[string](t, "validate"), nil)
		return json.RawMessage(`"ignored"`), nil
	}, nil)

	require.Equal(t, "text", replayed)
	require.True(t, errors.Is(res.Err, interpreter.ErrStopping), "got %v", res.Err)
	require.True(t, errors.Is(laterErr, interpreter.ErrStopping), "got %v", laterErr)
	require.Nil(t, res.Step, "a stop is not a step's failure")
	require.Nil(t, res.Output)
	require.Zero(t, res.Executed)
	require.Empty(t, b.rec.recorded())
}

func TestRunStoppingDuringStepRecordsItThenStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stopping := make(chan struct{})
	b.params.Stopping = stopping
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
			close(stopping) // the worker begins to stop while the step runs
			return "text", nil
		}, nil); err != nil {
			return nil, err
		}
		_, err := workflow.Step(ctx, "extract", mustNotRun[string](t, "extract"), nil)
		return nil, err
	}, nil)
	require.True(t, errors.Is(res.Err, interpreter.ErrStopping), "got %v", res.Err)
	require.Equal(t, 1, res.Executed)
	require.Equal(t, []history.StepCompletedData{{Position: 0, Name: "ocr", Output: json.RawMessage(`"text"`)}},
		b.rec.recorded(), "a step that finished is recorded even when the worker is stopping")
}

func TestRunCancelledContextStopsBeforeNextNewStep(t *testing.T) {
	t.Parallel()
	errLeaseLost := errors.New("lease lost")
	b := setup(t, recordedStep(t, 0, "ocr", "text"))
	ctx, cancel := context.WithCancelCause(context.Background())
	b.params.Context = ctx
	res := interpreter.Run(b.params, func(wctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(wctx, "ocr", mustNotRun[string](t, "ocr"), nil); err != nil {
			return nil, err
		}
		if _, err := workflow.Step(wctx, "extract", func(context.Context) (string, error) {
			cancel(errLeaseLost)
			return "fields", nil
		}, nil); err != nil {
			return nil, err
		}
		_, err := workflow.Step(wctx, "validate", mustNotRun[bool](t, "validate"), nil)
		return nil, err
	}, nil)

	require.True(t, errors.Is(res.Err, errLeaseLost), "the run ends with the context's cause, got %v", res.Err)
	require.Nil(t, res.Step)
	require.Equal(t, 1, res.Executed)
	rec := written(b.rec, res)
	require.Len(t, rec, 1)
	require.Equal(t, "extract", rec[0].Name)
}

func TestRunContextCancelledBeforeRunReplaysThenStops(t *testing.T) {
	t.Parallel()
	b := setup(t, recordedStep(t, 0, "ocr", "text"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.params.Context = ctx
	var replayed string
	res := interpreter.Run(b.params, func(wctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		var err error
		if replayed, err = workflow.Step(wctx, "ocr", mustNotRun[string](t, "ocr"), nil); err != nil {
			return nil, err
		}
		_, err = workflow.Step(wctx, "extract", mustNotRun[string](t, "extract"), nil)
		return nil, err
	}, nil)
	require.Equal(t, "text", replayed)
	require.True(t, errors.Is(res.Err, context.Canceled), "got %v", res.Err)
	require.Zero(t, res.Executed)
}

func TestRunBodyPanicBecomesError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var res interpreter.Result
	require.NotPanics(t, func() {
		res = interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			if _, err := workflow.Step(ctx, "ocr", constStep("text"), nil); err != nil {
				return nil, err
			}
			panic("body exploded")
		}, nil)
	})
	require.Error(t, res.Err)
	require.Contains(t, res.Err.Error(), "panic")
	require.Contains(t, res.Err.Error(), "body exploded")
	require.Nil(t, res.Step)
	require.Nil(t, res.Output)
	require.Equal(t, 1, res.Executed)
	require.Len(t, written(b.rec, res), 1)
}

func TestRunStepPanicBecomesStepError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var res interpreter.Result
	var stepErr error
	require.NotPanics(t, func() {
		res = interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			_, stepErr = workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
				panic("ocr engine crashed")
			}, nil)
			_, _ = workflow.Step(ctx, "extract", mustNotRun[string](t, "extract"), nil)
			return nil, nil
		}, nil)
	})
	require.Error(t, res.Err)
	require.Same(t, stepErr, res.Err, "the step's panic is the step's error")
	require.Contains(t, res.Err.Error(), "panic")
	require.Equal(t, &interpreter.StepInfo{Position: 0, Name: "ocr"}, res.Step)
	require.Equal(t, 1, res.Executed)
	require.Empty(t, b.rec.recorded())
}

// A body that ignores the error that ended its run and then panics (on the
// zero value Step returned) must not turn a stop or a retryable step error
// into a panic error: the worker would fail the task permanently instead of
// handing it back or retrying it.
func TestRunPanicAfterAbortKeepsAbortError(t *testing.T) {
	t.Parallel()
	t.Run("Stopping", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stopping := make(chan struct{})
		close(stopping)
		b.params.Stopping = stopping
		res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			doc, _ := workflow.Step(ctx, "load", constStep(&extracted{Pages: 1}), nil)
			return json.RawMessage(`"ignored"`), errors.Newf("pages: %d", doc.Pages) // nil dereference
		}, nil)
		require.True(t, errors.Is(res.Err, interpreter.ErrStopping), "got %v", res.Err)
	})
	t.Run("StepError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		errLLM := errors.New("llm 503")
		res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			doc, _ := workflow.Step(ctx, "load", func(context.Context) (*extracted, error) { return nil, errLLM }, nil)
			return json.RawMessage(`"ignored"`), errors.Newf("pages: %d", doc.Pages) // nil dereference
		}, nil)
		require.True(t, errors.Is(res.Err, errLLM), "got %v", res.Err)
		require.Equal(t, &interpreter.StepInfo{Position: 0, Name: "load"}, res.Step)
	})
}

func TestRunRecordFailureAbortsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errDB := errors.New("connection reset")
	b.rec.err = errDB
	var extractErr error
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "ocr", constStep("text"), nil)
		require.NoError(t, err, "ocr is recorded when the next step begins")
		_, extractErr = workflow.Step(ctx, "extract", mustNotRun[string](t, "extract"), nil)
		return json.RawMessage(`"ignored"`), nil
	}, nil)
	require.True(t, errors.Is(res.Err, errDB), "got %v", res.Err)
	require.True(t, errors.Is(res.Err, interpreter.ErrRecordFailed))
	require.Same(t, extractErr, res.Err, "the step that could not begin returns the error")
	require.Contains(t, res.Err.Error(), "ocr")
	require.Nil(t, res.Output)
	require.Equal(t, 1, res.Executed)
}

func TestRunUnencodableStepOutputFailsStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "open", constStep(make(chan int)), nil)
		return nil, err
	}, nil)
	require.Error(t, res.Err)
	require.Equal(t, &interpreter.StepInfo{Position: 0, Name: "open"}, res.Step)
	require.Empty(t, b.rec.recorded())
}

func TestRunDefaultsNilContextAndStopping(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	res := interpreter.Run(interpreter.RunParams{TaskID: "t", Attempt: 2, Record: rec.record},
		interpreter.Typed(func(ctx workflow.Context, _ struct{}) (int, error) {
			require.Equal(t, 2, ctx.Attempt())
			return workflow.Step(ctx, "one", constStep(1), nil)
		}), nil)
	require.NoError(t, res.Err)
	require.JSONEq(t, `1`, string(res.Output))
}

func TestTyped(t *testing.T) {
	t.Parallel()
	type doc struct {
		Pages int    `json:"pages"`
		Title string `json:"title"`
	}
	tests := []struct {
		name    string
		input   json.RawMessage
		want    doc  // what the body receives
		badIn   bool // the input cannot be decoded
		wantOut string
	}{
		{name: "Object", input: json.RawMessage(`{"pages": 3, "title": "invoice"}`), want: doc{Pages: 3, Title: "invoice"}, wantOut: `"invoice:3"`},
		{name: "Empty", input: nil, want: doc{}, wantOut: `":0"`},
		{name: "Null", input: json.RawMessage(`null`), want: doc{}, wantOut: `":0"`},
		{name: "String", input: json.RawMessage(`"a string"`), badIn: true},
		{name: "Array", input: json.RawMessage(`[1, 2]`), badIn: true},
		{name: "WrongFieldType", input: json.RawMessage(`{"pages": "three"}`), badIn: true},
		{name: "Malformed", input: json.RawMessage(`{"pages":`), badIn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ran := false
			res := interpreter.Run(b.params, interpreter.Typed(func(_ workflow.Context, in doc) (string, error) {
				ran = true
				require.Equal(t, tt.want, in)
				return in.Title + ":" + strconv.Itoa(in.Pages), nil
			}), tt.input)
			if tt.badIn {
				require.True(t, errors.Is(res.Err, interpreter.ErrBadInput), "got %v", res.Err)
				require.False(t, ran, "the body must not run with undecodable input")
				require.Nil(t, res.Step)
				return
			}
			require.NoError(t, res.Err)
			require.True(t, ran)
			require.JSONEq(t, tt.wantOut, string(res.Output))
		})
	}
}

func TestTypedUnencodableOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, interpreter.Typed(func(workflow.Context, struct{}) (chan int, error) {
		return make(chan int), nil
	}), nil)
	require.Error(t, res.Err)
	require.False(t, errors.Is(res.Err, interpreter.ErrBadInput))
	require.Nil(t, res.Output)
}

func TestTypedBodyErrorPassesThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errRefused := errors.New("refused")
	res := interpreter.Run(b.params, interpreter.Typed(func(workflow.Context, struct{}) (string, error) {
		return "partial", errRefused
	}), nil)
	require.True(t, errors.Is(res.Err, errRefused), "got %v", res.Err)
	require.Nil(t, res.Output)
}

func TestHasNULEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		want bool
	}{
		{`"plain"`, false},
		{`"a\u0000b"`, true},
		{`{"k":"\u0000"}`, true},
		{`"\\u0000"`, false}, // a backslash, then the text u0000
		{`"\\\u0000"`, true}, // a backslash, then NUL
		{`"\u00001"`, true},
		{`"\u0001"`, false},
		{`"\\"`, false},
	} {
		require.Equal(t, tc.want, interpreter.HasNULEscape([]byte(tc.json)), tc.json)
	}
	encoded, err := json.Marshal("ocr text with a \x00 byte")
	require.NoError(t, err)
	require.True(t, interpreter.HasNULEscape(encoded), "json.Marshal writes NUL as \\u0000")
}

func TestStepOutputWithNULIsUnstorable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		_, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) {
			return "page\x00two", nil
		}, nil)
		return nil, err
	}, nil)
	require.True(t, errors.Is(res.Err, interpreter.ErrUnstorable), "got %v", res.Err)
	require.NotNil(t, res.Step)
	require.Equal(t, "ocr", res.Step.Name)
	require.Empty(t, b.rec.recorded(), "nothing recorded")
}

// written is what a run put on record: the steps it recorded, then the one
// it left pending for the caller to write with the outcome.
func written(rec *recorder, res interpreter.Result) []history.StepCompletedData {
	out := rec.recorded()
	if res.Pending != nil {
		out = append(out, res.Pending.(history.StepCompletedData))
	}
	return out
}

func TestRunRecordsEachStepBeforeTheNextBegins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := interpreter.Run(b.params, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		if _, err := workflow.Step(ctx, "a", constStep(1), nil); err != nil {
			return nil, err
		}
		require.Empty(t, b.rec.recorded(), "the last step waits to be written with what follows")
		_, err := workflow.Step(ctx, "b", func(context.Context) (int, error) {
			require.Len(t, b.rec.recorded(), 1, "step a is on record before step b begins")
			return 2, nil
		}, nil)
		return nil, err
	}, nil)
	require.NoError(t, res.Err)
	require.Len(t, b.rec.recorded(), 1)
	require.Equal(t, history.StepCompletedData{Position: 1, Name: "b", Output: json.RawMessage("2")}, res.Pending)
}

// A history asleep at a position, run by code that calls a step there
// instead, is non-deterministic (not a step to run and fail to record).
func TestStepWhereTheHistorySleepsIsNondeterministic(t *testing.T) {
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "t", Attempt: 2, Context: context.Background(),
		Steps:  []history.Step{{Position: 0, Name: "schedule", Output: json.RawMessage(`"ok"`)}},
		Timer:  &history.Timer{Position: 1, FireAt: time.Now().Add(time.Hour)},
		Now:    time.Now,
		Record: func(history.Payload) error { return nil },
	}, interpreter.Typed(func(ctx workflow.Context, _ string) (string, error) {
		if _, err := workflow.Step(ctx, "schedule", func(context.Context) (string, error) { return "ok", nil }, nil); err != nil {
			return "", err
		}
		return workflow.Step(ctx, "send", func(context.Context) (string, error) { return "sent", nil }, nil)
	}), json.RawMessage(`"in"`))
	require.True(t, errors.Is(res.Err, workflow.ErrNondeterministic), "%v", res.Err)
	require.Contains(t, res.Err.Error(), `history recorded "sleep", workflow called "send"`)
	require.Zero(t, res.Executed)
}
