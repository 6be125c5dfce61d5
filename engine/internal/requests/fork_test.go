package requests_test

import (
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// forkCopies replays the history es builds and asks ForkCopies at at.
func forkCopies(t *testing.T, at int, es ...historytest.E) ([]requests.ForkCopy, error) {
	t.Helper()
	events := historytest.Build(es...)
	state, err := history.Replay(events)
	require.NoError(t, err)
	copies, _, err := requests.ForkCopies(uuid.Nil, events, state, at)
	return copies, err
}

// What a fork copies: the steps up to the position, a sleep as a step
// named "sleep", each naming the seq of its record, without usage.
func TestForkCopiesTheStepsUpToThePosition(t *testing.T) {
	t.Parallel()
	paid := historytest.Step(1, 0, "ask")
	step := paid.Data.(history.StepCompletedData)
	step.Usage = []history.Usage{{Model: "m", InputTokens: 10, CostUSD: 0.1}}
	paid.Data = step
	copies, err := forkCopies(t, 1,
		historytest.Scheduled(), historytest.Started(1, 1), paid,
		historytest.E{Attempt: 1, Data: history.TimerStartedData{Position: 1, FireAt: historytest.Base.Add(time.Second)}},
		historytest.Started(2, 2),
		historytest.E{Attempt: 2, Data: history.TimerFiredData{Position: 1}},
		historytest.Step(2, 2, "answer"),
	)
	require.NoError(t, err)
	require.Len(t, copies, 2)
	require.Equal(t, int64(3), copies[0].Seq)
	require.Equal(t, "ask", copies[0].Step.Name)
	require.Nil(t, copies[0].Step.Usage, "usage stays the original's")
	require.Equal(t, int64(3), copies[0].Step.CopiedFromSeq)
	require.False(t, copies[0].Sleep)
	require.Equal(t, history.StepCompletedData{Position: 1, Name: history.SleepStepName, CopiedFromSeq: 6}, copies[1].Step)
	require.True(t, copies[1].Sleep)
}

// What a fork refuses, before anything is read or written.
func TestForkCopiesRefusals(t *testing.T) {
	t.Parallel()
	sched, started := historytest.Scheduled(), historytest.Started(1, 1)
	for _, tc := range []struct {
		name   string
		at     int
		events []historytest.E
		is     error
		want   string
	}{
		{"beyond", 1, []historytest.E{sched, started, historytest.Step(1, 0, "a")}, store.ErrTaskState, "it has 1 steps on record (positions 0 to 0)"},
		{"ahead of a gap", 2, []historytest.E{sched, started, historytest.Step(1, 0, "a"), historytest.Step(1, 2, "c")}, store.ErrTaskState,
			"the step there completed ahead of position 1, which is not on record; fork at a position below 1"},
		{"child before", 1, []historytest.E{sched, started, historytest.Step(1, 0, "a"),
			{Attempt: 1, Data: history.ChildStartedData{Position: 0, ChildID: "c-1", TaskType: "ocr"}}, historytest.Step(1, 1, "b")},
			store.ErrUnsupported, "records child_started (event 4) before the step there completed"},
		{"signal before", 0, []historytest.E{sched, historytest.Signal("go", "1", ""), started, historytest.Step(1, 0, "a")},
			store.ErrUnsupported, "records signal_received (event 2)"},
		{"compensated", 1, []historytest.E{sched, started,
			{Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "a", Compensable: true}}, historytest.Step(1, 1, "b"),
			{Attempt: 1, Data: history.CancelRequestedData{By: "ops"}},
			{Attempt: 1, Data: history.CompensationStartedData{Reason: history.CompensateCancelled, Steps: []int{0}}},
			{Attempt: 1, Data: history.StepCompensatedData{Position: 0, Name: "a"}}},
			store.ErrTaskState, "step 0 was compensated"},
	} {
		_, err := forkCopies(t, tc.at, tc.events...)
		require.Error(t, err, tc.name)
		require.True(t, errors.Is(err, tc.is), "%s: %v", tc.name, err)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	// A child started after the step at the position is no obstacle.
	_, err := forkCopies(t, 0, sched, started, historytest.Step(1, 0, "a"),
		historytest.E{Attempt: 1, Data: history.ChildStartedData{Position: 0, ChildID: "c-1", TaskType: "ocr"}})
	require.NoError(t, err)
}

// The patch markers recorded at the positions a fork copies are copied
// with the seq of their record; a marker past the position is not.
func TestForkCopiesThePatchMarkersUpToThePosition(t *testing.T) {
	t.Parallel()
	events := historytest.Build(historytest.Scheduled(), historytest.Started(1, 1), historytest.Step(1, 0, "a"),
		historytest.E{Attempt: 1, Data: history.PatchRecordedData{PatchID: "p1", Position: 1}},
		historytest.Step(1, 1, "b"),
		historytest.E{Attempt: 1, Data: history.PatchRecordedData{PatchID: "p2", Position: 2}},
		historytest.Step(1, 2, "c"))
	state, err := history.Replay(events)
	require.NoError(t, err)
	_, patches, err := requests.ForkCopies(uuid.Nil, events, state, 1)
	require.NoError(t, err)
	require.Equal(t, []history.PatchRecordedData{{PatchID: "p1", Position: 1, CopiedFromSeq: 4}}, patches)
}
