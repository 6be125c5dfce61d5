package interpreter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

func oneStep(ctx interpreter.Context, name string) error {
	_, err := interpreter.Step(ctx, name, func(context.Context) (int, error) { return 1, nil }, nil)
	return err
}

// body is a workflow of calls: "step:NAME", "sleep", "receive:NAME",
// "child:TYPE" (started and awaited), "remote:NAME" (dispatched and
// awaited).
func body(calls ...string) interpreter.Func {
	return func(ctx interpreter.Context, _ json.RawMessage) (json.RawMessage, error) {
		for _, c := range calls {
			var err error
			switch {
			case c == "sleep":
				err = interpreter.Sleep(ctx, time.Hour)
			case len(c) > 5 && c[:5] == "step:":
				err = oneStep(ctx, c[5:])
			case len(c) > 8 && c[:8] == "receive:":
				_, _, err = interpreter.Receive[json.RawMessage](ctx, c[8:], time.Hour)
			case len(c) > 7 && c[:7] == "remote:":
				_, err = interpreter.RemoteResult(ctx, interpreter.Remote(ctx, c[7:], json.RawMessage(`1`), interpreter.RemoteOptions{Queue: "q"}))
			case len(c) > 6 && c[:6] == "child:":
				var h interpreter.ChildHandle
				if h, err = interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: c[6:], TypeVersion: 1}); err == nil {
					_, err = interpreter.ChildResult(ctx, h)
				}
			}
			if err != nil {
				return nil, err
			}
		}
		return json.RawMessage(`1`), nil
	}
}

func steps(names ...string) []history.Step {
	out := make([]history.Step, len(names))
	for i, n := range names {
		out[i] = history.Step{Position: i, Name: n, Output: json.RawMessage(`1`)}
	}
	return out
}

func TestReplayFindsWhatTheRuntimeWouldNot(t *testing.T) {
	t.Parallel()
	waiting := history.State{Status: history.StatusPending, Steps: steps("extract"),
		Waits: []history.Wait{{Name: "approve", Position: 0}}}
	waiting.Wait = &waiting.Waits[0]
	sleeping := history.State{Status: history.StatusPending, Steps: steps("a"), Timer: &history.Timer{Position: 1}}
	parent := history.State{Status: history.StatusPending, Children: []history.Child{{Position: 0, TaskType: "kid"}}}
	done := history.State{Status: history.StatusCompleted, Steps: steps("a", "b"), Output: json.RawMessage(`1`)}
	remote := history.State{Status: history.StatusPending, Steps: steps("a"),
		Remote: []history.RemoteStep{{Position: 1, Name: "ocr", Queue: "q", Attempt: 1}}}
	remoteFailed := history.State{Status: history.StatusPending, Steps: steps("a"),
		Remote: []history.RemoteStep{{Position: 1, Name: "ocr", Queue: "q", Attempt: 1, Failed: &history.ErrorInfo{Message: "boom"}}}}
	for _, tc := range []struct {
		name  string
		state history.State
		fn    interpreter.Func
		want  *interpreter.NondeterminismError // nil: replays
	}{
		{"waiting, same code", waiting, body("step:extract", "receive:approve"), nil},
		{"waiting, a step added before the receive", waiting, body("step:extract", "step:classify", "receive:approve"),
			&interpreter.NondeterminismError{Kind: "receive", Position: 0, Recorded: "approve", Called: `(step 1 "classify")`}},
		{"waiting, another signal", waiting, body("step:extract", "receive:other"),
			&interpreter.NondeterminismError{Kind: "receive", Position: 0, Recorded: "approve", Called: "other"}},
		{"waiting, the receive removed", waiting, body("step:extract"),
			&interpreter.NondeterminismError{Kind: "receive", Position: 0, Recorded: "approve", Called: "(workflow returned)"}},
		{"sleeping, same code", sleeping, body("step:a", "sleep"), nil},
		{"sleeping, a step in the sleep's place", sleeping, body("step:a", "step:b", "sleep"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "sleep", Called: "b"}},
		{"sleeping, a receive before the sleep", sleeping, body("step:a", "receive:x", "sleep"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "sleep", Called: `(receive 0 of "x")`}},
		{"parent, same code", parent, body("child:kid"), nil},
		{"parent, a step added before the child", parent, body("step:prep", "child:kid"),
			&interpreter.NondeterminismError{Kind: "child", Position: 0, Recorded: "kid", Called: `(step 0 "prep")`}},
		{"parent, another child type", parent, body("child:other"),
			&interpreter.NondeterminismError{Kind: "child", Position: 0, Recorded: "kid", Called: "other"}},
		{"completed, same code", done, body("step:a", "step:b"), nil},
		{"completed, a step added at the end", done, body("step:a", "step:b", "step:c"),
			&interpreter.NondeterminismError{Kind: "end", Position: 2, Recorded: "(workflow returned)", Called: `(step 2 "c")`}},
		{"completed, a step renamed", done, body("step:a", "step:x"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "b", Called: "x"}},
		{"awaiting a remote step, same code", remote, body("step:a", "remote:ocr"), nil},
		{"a remote step failed, to be classified, same code", remoteFailed, body("step:a", "remote:ocr"), nil},
		{"a remote step failed, renamed", remoteFailed, body("step:a", "remote:embed"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "ocr", Called: "embed"}},
		{"awaiting a remote step, renamed", remote, body("step:a", "remote:embed"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "ocr", Called: "embed"}},
		{"awaiting a remote step, a Go step in its place", remote, body("step:a", "step:ocr"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "ocr", Called: "ocr"}},
		{"awaiting a remote step, a sleep in its place", remote, body("step:a", "sleep"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "ocr", Called: "sleep"}},
		{"awaiting a remote step, a receive before it", remote, body("step:a", "receive:x", "remote:ocr"),
			&interpreter.NondeterminismError{Kind: "step", Position: 1, Recorded: "ocr", Called: `(receive 0 of "x")`}},
		{"retrying at a new step, same code", history.State{Status: history.StatusRetrying, Steps: steps("a")}, body("step:a", "step:b"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd, err := interpreter.Replay(context.Background(), "t", tc.state, tc.fn)
			require.NoError(t, err)
			require.Equal(t, tc.want, nd)
		})
	}
}

// Without Strict, a collect-only run (compensation's) stops at the new
// step as before, whatever the history records beyond.
func TestCollectOnlyIsNotStrict(t *testing.T) {
	t.Parallel()
	p := interpreter.RunParams{Steps: steps("extract"), CollectOnly: true,
		Mailbox: func() interpreter.Mailbox {
			return interpreter.Mailbox{Waits: []history.Wait{{Name: "approve", Position: 0}}}
		},
		Record: func(history.Payload) error { return errors.New("no") }}
	res := interpreter.Run(p, body("step:extract", "step:classify", "receive:approve"), nil)
	require.ErrorIs(t, res.Err, interpreter.ErrCollected)
	require.Equal(t, `step 1 "classify"`, res.Collected)
}

func TestReplayReportsWhatItCannotDecide(t *testing.T) {
	t.Parallel()
	s := history.State{Status: history.StatusPending, Steps: steps("a")}
	_, err := interpreter.Replay(context.Background(), "t", s, func(interpreter.Context, json.RawMessage) (json.RawMessage, error) {
		panic("boom")
	})
	require.ErrorContains(t, err, "boom")
	nd, err := interpreter.Replay(context.Background(), "t", history.State{Status: history.StatusFailed, Steps: steps("a")},
		func(interpreter.Context, json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New("failed as before")
		})
	require.NoError(t, err, "a failed history may replay to a failure")
	require.Nil(t, nd)
}
