package workflow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
)

// def is a workflow type for tests: a name and a body.
type def[In, Out any] struct {
	name string
	fn   func(workflow.Context, In) (Out, error)
}

func (d def[In, Out]) TypeName() string                              { return d.name }
func (d def[In, Out]) TypeVersion() int                              { return 1 }
func (d def[In, Out]) ChildDefaults() workflow.ChildDefaults         { return workflow.ChildDefaults{} }
func (d def[In, Out]) Func() func(workflow.Context, In) (Out, error) { return d.fn }

// runChildren runs body over children, collecting the starts it writes.
func runChildren(t *testing.T, children []history.Child, body func(workflow.Context) error) ([]interpreter.ChildRequest, interpreter.Result) {
	t.Helper()
	var started []interpreter.ChildRequest
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Context: context.Background(),
		Record:        func(history.Payload) error { return nil },
		Children:      func() []history.Child { return children },
		StartChildren: func(reqs []interpreter.ChildRequest) error { started = append(started, reqs...); return nil },
	}, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		return nil, body(ctx)
	}, nil)
	return started, res
}

// MapChunks starts a chunk child per size inputs, in order, and returns
// the chunks' outputs flattened in input order; a failed chunk's outputs
// are zero values and its error comes back once all have finished.
func TestMapChunksSplitsAndJoinsInOrder(t *testing.T) {
	t.Parallel()
	item := def[int, int]{name: "item"}
	chunk := def[[]int, []int]{name: "chunk", fn: workflow.Chunk[int, int](item, nil)}
	inputs := []int{10, 11, 12, 13, 14}
	var outs []int
	var err error
	body := func(ctx workflow.Context) error {
		outs, err = workflow.MapChunks(ctx, chunk, inputs, 2, nil)
		return err
	}

	started, res := runChildren(t, nil, body)
	var wait *interpreter.ChildWaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Len(t, started, 3)
	for i, want := range []string{`[10,11]`, `[12,13]`, `[14]`} {
		require.Equal(t, "chunk", started[i].TaskType)
		require.Equal(t, i, started[i].Position)
		require.JSONEq(t, want, string(started[i].Input))
	}

	finished := func(pos int, out string) history.Child {
		return history.Child{Position: pos, ID: "c" + string(rune('0'+pos)), TaskType: "chunk", Finished: true,
			Status: history.StatusCompleted, Output: json.RawMessage(out)}
	}
	children := []history.Child{finished(0, `[20,21]`), finished(1, `[22,23]`), finished(2, `[24]`)}
	_, res = runChildren(t, children, body)
	require.NoError(t, res.Err)
	require.Equal(t, []int{20, 21, 22, 23, 24}, outs)

	children[1] = history.Child{Position: 1, ID: "c1", TaskType: "chunk", Finished: true, Status: history.StatusFailed,
		Error: &history.ErrorInfo{Class: history.Permanent, Message: "child 1 (item, task x) failed: boom"}}
	_, res = runChildren(t, children, body)
	var ce *workflow.ChildError
	require.ErrorAs(t, res.Err, &ce)
	require.Equal(t, 1, ce.Position)
	require.True(t, errors.Is(res.Err, workflow.ErrChildFailed))
	require.Equal(t, []int{20, 21, 0, 0, 24}, outs)
}

func TestMapChunksRefusesASizeBelowOne(t *testing.T) {
	t.Parallel()
	chunk := def[[]int, []int]{name: "chunk"}
	_, res := runChildren(t, nil, func(ctx workflow.Context) error {
		_, err := workflow.MapChunks(ctx, chunk, []int{1}, 0, nil)
		return err
	})
	require.ErrorContains(t, res.Err, "chunk size 0")
}
