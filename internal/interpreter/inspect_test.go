package interpreter_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// staged is a workflow that sets a query "stage" to the name of each
// step before running it, then waits for "approve", counting the steps
// it runs.
func staged(ran *atomic.Int32, extra func(ctx interpreter.Context, stage *string) error) interpreter.Func {
	return func(ctx interpreter.Context, _ json.RawMessage) (json.RawMessage, error) {
		stage := "starting"
		if err := interpreter.SetQuery(ctx, "stage", interpreter.TypedQuery(func(suffix string) (string, error) {
			return stage + suffix, nil
		})); err != nil {
			return nil, err
		}
		for _, name := range []string{"a", "b", "c"} {
			stage = name
			if _, err := interpreter.Step(ctx, name, func(context.Context) (int, error) { ran.Add(1); return 1, nil }, nil); err != nil {
				return nil, err
			}
		}
		stage = "approving"
		if extra != nil {
			if err := extra(ctx, &stage); err != nil {
				return nil, err
			}
		}
		if _, _, err := interpreter.Receive[json.RawMessage](ctx, "approve", time.Hour); err != nil {
			return nil, err
		}
		stage = "done"
		return json.RawMessage(`1`), nil
	}
}

func query(t *testing.T, s history.State, fn interpreter.Func, name string, args string) (string, error) {
	t.Helper()
	var out json.RawMessage
	err := interpreter.Inspect(context.Background(), "t", s, fn, func(f *interpreter.Inspection) error {
		var err error
		out, err = f.CallQuery(name, json.RawMessage(args))
		return err
	})
	return string(out), err
}

func TestInspectAnswersAsOfTheLatestEvent(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	fn := staged(&ran, nil)
	for _, tc := range []struct {
		name  string
		state history.State
		want  string
	}{
		{"nothing recorded", history.State{Status: history.StatusPending}, `"a?"`},
		{"one step recorded", history.State{Status: history.StatusRunning, Steps: steps("a")}, `"b?"`},
		{"waiting for approval", history.State{Status: history.StatusPending, Steps: steps("a", "b", "c"),
			Waits: []history.Wait{{Name: "approve", Position: 0}}}, `"approving?"`},
		{"approved, not yet run on", history.State{Status: history.StatusPending, Steps: steps("a", "b", "c"),
			Signals: []history.Signal{{Name: "approve", Payload: json.RawMessage(`{}`)}}}, `"done?"`},
		{"finished", history.State{Status: history.StatusCompleted, Steps: steps("a", "b", "c"), Output: json.RawMessage(`1`),
			Signals: []history.Signal{{Name: "approve", Payload: json.RawMessage(`{}`)}}}, `"done?"`},
	} {
		got, err := query(t, tc.state, fn, "stage", `"?"`)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
	require.Zero(t, ran.Load(), "a query runs no step")
}

func TestInspectRefuses(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	running := history.State{Status: history.StatusRunning, Steps: steps("a")}

	_, err := query(t, running, staged(&ran, nil), "progress", "")
	require.ErrorIs(t, err, interpreter.ErrHandlerNotFound)
	var nf *interpreter.HandlerNotFoundError
	require.True(t, errors.As(err, &nf))
	require.Equal(t, []string{"stage"}, nf.Registered)
	require.Contains(t, err.Error(), `no query "progress"`)

	_, err = query(t, running, staged(&ran, nil), "stage", `{"not":"a string"}`)
	require.ErrorIs(t, err, interpreter.ErrBadArgs)

	// A history the code parts from is not inspected.
	_, err = query(t, history.State{Status: history.StatusRunning, Steps: steps("x")}, staged(&ran, nil), "stage", "")
	require.ErrorIs(t, err, interpreter.ErrReplayFailed)
	require.ErrorIs(t, err, interpreter.ErrNondeterministic)
	// Nor a completed history the code goes on past.
	_, err = query(t, history.State{Status: history.StatusCompleted, Steps: steps("a", "b"), Output: json.RawMessage(`1`)},
		staged(&ran, nil), "stage", "")
	require.ErrorIs(t, err, interpreter.ErrReplayFailed)

	// A handler that calls into the run is refused: nothing runs.
	var stepErr error
	sneaky := staged(&ran, func(ctx interpreter.Context, _ *string) error {
		return interpreter.SetQuery(ctx, "sneak", interpreter.TypedQuery(func(struct{}) (int, error) {
			n, err := interpreter.Step(ctx, "sneak", func(context.Context) (int, error) { ran.Add(1); return 1, nil }, nil)
			stepErr = err
			return n, err
		}))
	})
	waiting := history.State{Status: history.StatusPending, Steps: steps("a", "b", "c"), Waits: []history.Wait{{Name: "approve", Position: 0}}}
	_, err = query(t, waiting, sneaky, "sneak", "")
	require.ErrorIs(t, err, interpreter.ErrReadOnly)
	require.ErrorIs(t, stepErr, interpreter.ErrReadOnly)

	// A panicking handler is an error.
	panicky := staged(&ran, func(ctx interpreter.Context, _ *string) error {
		return interpreter.SetQuery(ctx, "panic", interpreter.TypedQuery(func(struct{}) (int, error) { panic("boom") }))
	})
	_, err = query(t, waiting, panicky, "panic", "")
	require.ErrorContains(t, err, "handler panicked: boom")

	// A handler past its time is left: Inspect returns.
	release := make(chan struct{})
	defer close(release)
	slow := staged(&ran, func(ctx interpreter.Context, _ *string) error {
		return interpreter.SetQuery(ctx, "slow", interpreter.TypedQuery(func(struct{}) (int, error) { <-release; return 0, nil }))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err = interpreter.Inspect(ctx, "t", waiting, slow, func(f *interpreter.Inspection) error {
		_, err := f.CallQuery("slow", nil)
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, ran.Load(), "a query runs no step")
}

func TestSetQueryRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", strings.Repeat("q", interpreter.MaxHandlerNameBytes+1), "a\nb", "\xff"} {
		res := interpreter.Run(interpreter.RunParams{Record: func(history.Payload) error { return nil }},
			func(ctx interpreter.Context, _ json.RawMessage) (json.RawMessage, error) {
				return nil, interpreter.SetQuery(ctx, name, interpreter.TypedQuery(func(struct{}) (int, error) { return 0, nil }))
			}, nil)
		require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts, "%q", name)
	}
	res := interpreter.Run(interpreter.RunParams{Record: func(history.Payload) error { return nil }},
		func(ctx interpreter.Context, _ json.RawMessage) (json.RawMessage, error) {
			return nil, interpreter.SetQuery(ctx, "nil", nil)
		}, nil)
	require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts)
	require.NoError(t, interpreter.ValidHandlerName(strings.Repeat("q", interpreter.MaxHandlerNameBytes)))
	require.NoError(t, interpreter.ValidHandlerName("progress report"))
}
