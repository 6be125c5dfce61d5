package workflow_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
)

// fanOut is a parent's view of its children for a run: the starts it
// writes join them, running; ends (when given) finishes the ones a wait
// within the attempt names.
type fanOut struct {
	children []history.Child
	batches  []int // the size of each StartChildren
	waits    int   // calls of AwaitChildEnds
}

func (f *fanOut) run(t *testing.T, maxRunning int, inputs []int, ends bool) ([]int, interpreter.Result) {
	t.Helper()
	item := def[int, int]{name: "item"}
	var outs []int
	p := interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Context: context.Background(), MaxRunningChildren: maxRunning,
		Record:   func(history.Payload) error { return nil },
		Children: func() []history.Child { return f.children },
		StartChildren: func(reqs []interpreter.ChildRequest) error {
			f.batches = append(f.batches, len(reqs))
			for _, r := range reqs {
				require.Equal(t, len(f.children), r.Position)
				f.children = append(f.children, history.Child{Position: r.Position, ID: "c" + strconv.Itoa(r.Position), TaskType: "item"})
			}
			return nil
		},
		AwaitChildEnds: func(positions []int, count int) bool {
			f.waits++
			if !ends {
				return false
			}
			require.Len(t, positions, maxRunning, "the running children")
			require.Equal(t, 1, count, "a tenth of them, at least one: the run starts more as soon as there is room")
			for _, pos := range positions {
				c := &f.children[pos]
				c.Finished, c.Status, c.Output = true, history.StatusCompleted, json.RawMessage(strconv.Itoa(10*pos))
			}
			return true
		},
	}
	res := interpreter.Run(p, func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		var err error
		outs, err = workflow.MapChildren(ctx, item, inputs, nil)
		return nil, err
	}, nil)
	return outs, res
}

// A parent whose starts the cap holds back waits within its attempt for
// its running children and starts the next ones there: a flat fan-out of
// 10 under a cap of 4 is one attempt, its starts in batches the cap
// allows, rather than an attempt per batch, each replaying the history.
func TestHeldBackStartsGoOnWithinTheAttempt(t *testing.T) {
	t.Parallel()
	f := &fanOut{}
	_, res := f.run(t, 4, make([]int, 10), true)
	require.Equal(t, []int{4, 4, 2}, f.batches, "every start in the one attempt")
	require.Equal(t, 2, f.waits)
	// The last ones are awaited as any fan-in is: the run ends to wait.
	var wait *interpreter.ChildWaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Equal(t, []int{8, 9}, wait.Positions)
	require.Equal(t, 2, wait.Count)

	// The next attempt replays it all and completes.
	for _, pos := range wait.Positions {
		c := &f.children[pos]
		c.Finished, c.Status, c.Output = true, history.StatusCompleted, json.RawMessage(strconv.Itoa(10*pos))
	}
	outs, res := f.run(t, 4, make([]int, 10), true)
	require.NoError(t, res.Err)
	require.Equal(t, []int{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, outs)
	require.Equal(t, []int{4, 4, 2}, f.batches, "no child started again")
	require.Equal(t, 2, f.waits)
}

// When the running children do not end in time, the run ends with the
// held-back wait, as without a wait within the attempt.
func TestHeldBackWaitIsRecordedWhenChildrenDoNotEnd(t *testing.T) {
	t.Parallel()
	f := &fanOut{}
	_, res := f.run(t, 4, make([]int, 10), false)
	var wait *interpreter.ChildWaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Equal(t, []int{0, 1, 2, 3}, wait.Positions)
	require.Equal(t, 2, wait.Count)
	require.Equal(t, []int{4}, f.batches)
	require.Equal(t, 1, f.waits)
}
