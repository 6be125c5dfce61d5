package console

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// mapHistory: "fetch", then a Map "embed" of three items (positions 1–3;
// the last fails in attempt 1 and is recorded in attempt 2), then a
// sleep (position 4) and two steps "embed" again, the second a step of
// its own after "store" (positions 5–6 and 8), and "store" (7).
func mapHistory() []history.Event {
	failed := history.ErrorInfo{Class: history.Transient, Message: "rate limited", Step: "embed", Position: 3}
	next := at(500)
	return []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(20), Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "fetch", DurationMillis: 10}},
		{Seq: 4, At: at(120), Attempt: 1, Data: history.StepCompletedData{Position: 1, Name: "embed", DurationMillis: 100}},
		{Seq: 5, At: at(121), Attempt: 1, Data: history.StepCompletedData{Position: 2, Name: "embed", DurationMillis: 90}},
		{Seq: 6, At: at(130), Attempt: 1, Data: history.AttemptFailedData{Error: failed, NextRunAt: &next}},
		{Seq: 7, At: at(500), Attempt: 2, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 2}},
		{Seq: 8, At: at(600), Attempt: 2, Data: history.StepCompletedData{Position: 3, Name: "embed", DurationMillis: 100}},
		{Seq: 9, At: at(610), Attempt: 2, Data: history.TimerStartedData{Position: 4, FireAt: at(700)}},
		{Seq: 10, At: at(700), Data: history.TimerFiredData{Position: 4}},
		{Seq: 11, At: at(710), Attempt: 3, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 3}},
		{Seq: 12, At: at(720), Attempt: 3, Data: history.StepCompletedData{Position: 5, Name: "embed", DurationMillis: 5}},
		{Seq: 13, At: at(730), Attempt: 3, Data: history.StepCompletedData{Position: 6, Name: "embed", DurationMillis: 5}},
		{Seq: 14, At: at(740), Attempt: 3, Data: history.StepCompletedData{Position: 7, Name: "store", DurationMillis: 5}},
		{Seq: 15, At: at(750), Attempt: 3, Data: history.StepCompletedData{Position: 8, Name: "embed", DurationMillis: 5}},
		{Seq: 16, At: at(760), Attempt: 3, Data: history.TaskCompletedData{}},
	}
}

// The items of one Map are numbered in the attempt list and on the time
// axis, across attempts and for the one that failed; a run is ended by a
// sleep between, and a step of its own gets no index.
func TestTimelineNumbersTheItemsOfAMap(t *testing.T) {
	t.Parallel()
	events := mapHistory()
	var names []string
	for _, b := range buildTimeline(events) {
		for _, s := range b.Steps {
			names = append(names, s.Name)
		}
	}
	want := []string{"fetch", "embed [0]", "embed [1]", "embed [2]", "embed [2]", "embed [0]", "embed [1]", "store", "embed"}
	require.Equal(t, want, names, "the attempt list")

	names = nil
	for _, r := range buildTimeAxis(events, true, at(760)).Rows {
		if r.Kind == rowStep {
			names = append(names, r.Label)
		}
	}
	require.Equal(t, want, names, "the time axis")
}

// A Map of three items run by a real worker shows [0] [1] [2] on the
// task's page (before, three rows had the same name).
func TestTaskPageNumbersTheItemsOfARealMap(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			wf := sdk.NewWorkflow("console.map", 1, func(ctx workflow.Context, items []int) ([]int, error) {
				return workflow.Map(ctx, "square", items, func(_ context.Context, n int) (int, error) { return n * n, nil }, nil)
			}, nil)
			_, run := runToCompletion(t, ns.Store, wf, []int{1, 2, 3})

			a := servertest.Send(t, testConsole(t, ns.Store), http.MethodGet, "/console/tasks/"+run.ID.String(), nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			bars := renderedBars(t, string(a.Body))
			for _, name := range []string{"step square [0]", "step square [1]", "step square [2]"} {
				require.Contains(t, bars, name)
			}
			require.NotContains(t, bars, "step square")
			require.Contains(t, string(a.Body), `aria-label="square [2] took`)
		})
	}
}
