package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// rebaseCase is a running attempt's state, and the log with what another
// writer appended after it.
func rebaseCase(t *testing.T, after ...historytest.E) (history.State, []history.Event) {
	t.Helper()
	running := historytest.Build(historytest.Scheduled(), historytest.Started(1, 1))
	state, err := history.Replay(running)
	require.NoError(t, err)
	all := historytest.Build(append([]historytest.E{historytest.Scheduled(), historytest.Started(1, 1)}, after...)...)
	return state, all
}

func TestRebaseOntoASignalKeepsTheAppend(t *testing.T) {
	t.Parallel()
	state, events := rebaseCase(t, historytest.Signal("approval", `1`, ""))
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{
		history.StepCompletedData{Position: 0, Name: "reserve"},
	}}
	rebased, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.Equal(t, p.Payloads, rebased.Payloads)
	require.Len(t, rebased.State.Signals, 1)
}

func TestRebaseTurnsAWaitForASignalThatCameIntoAHandBack(t *testing.T) {
	t.Parallel()
	state, events := rebaseCase(t, historytest.Signal("approval", `1`, ""))
	step := history.StepCompletedData{Position: 0, Name: "reserve"}
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{
		step, history.WaitStartedData{Name: "approval", Position: 0, Deadline: historytest.Base.Add(time.Hour)},
	}}
	rebased, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.Len(t, rebased.Payloads, 2)
	require.Equal(t, step, rebased.Payloads[0])
	released, isRelease := rebased.Payloads[1].(history.TaskReleasedData)
	require.True(t, isRelease, "got %T", rebased.Payloads[1])
	require.Equal(t, int64(1), released.LeaseEpoch)

	// A wait for another name is kept.
	p.Payloads[1] = history.WaitStartedData{Name: "other", Position: 0, Deadline: historytest.Base.Add(time.Hour)}
	rebased, ok = rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.IsType(t, history.WaitStartedData{}, rebased.Payloads[1])
}

func TestRebaseRefusesATimeoutAfterItsSignal(t *testing.T) {
	t.Parallel()
	// The task waited, was woken at its deadline, and a signal came while
	// the attempt decided it had timed out: the signal came first.
	running := historytest.Build(historytest.Scheduled(), historytest.Started(1, 1),
		historytest.E{Attempt: 1, Data: history.WaitStartedData{Name: "approval", Position: 0, Deadline: historytest.Base.Add(3 * time.Second)}},
		historytest.Started(2, 2))
	state, err := history.Replay(running)
	require.NoError(t, err)
	events := append(running, history.Event{Seq: 5, At: running[3].At, Data: history.SignalReceivedData{Name: "approval"}})
	p := &store.EventAppendParams{State: state, Epoch: 2, Attempt: 2, Payloads: []history.Payload{
		history.WaitTimedOutData{Name: "approval", Position: 0}, history.TaskCompletedData{},
	}}
	_, ok := rebaseOntoRequests(p, events)
	require.False(t, ok, "the receive takes the signal: the attempt is retried")
}

// A cancel appended while the attempt finished its last step wins: the
// completion is not written over it. The step is kept, and the task is
// handed back, so its next attempt compensates and ends cancelled.
func TestRebaseNeverCompletesOverACancel(t *testing.T) {
	t.Parallel()
	state, events := rebaseCase(t, historytest.E{Data: history.CancelRequestedData{By: "ops", Reason: "fraud"}})
	step := history.StepCompletedData{Position: 0, Name: "wire", Compensable: true}
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{
		step, history.TaskCompletedData{Output: []byte(`"w-1"`)},
	}}
	rebased, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.Len(t, rebased.Payloads, 2)
	require.Equal(t, step, rebased.Payloads[0])
	released, isRelease := rebased.Payloads[1].(history.TaskReleasedData)
	require.True(t, isRelease, "got %T", rebased.Payloads[1])
	require.Equal(t, int64(1), released.LeaseEpoch)
	require.True(t, rebased.State.CancelRequested)
	require.True(t, canFollow(rebased.State, 1, rebased.Payloads))

	// Without a cancel among the new events, the completion stands.
	state, events = rebaseCase(t, historytest.Signal("approval", `1`, ""))
	p.State = state
	rebased, ok = rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.IsType(t, history.TaskCompletedData{}, rebased.Payloads[1])
}

// A cancel appended as the attempt began to wait is not parked with the
// wait (until its deadline, or forever): the wait becomes task_released,
// so the task is due at once and its next attempt compensates.
func TestRebaseNeverParksACancel(t *testing.T) {
	t.Parallel()
	for name, wait := range map[string]history.Payload{
		"receive":  history.WaitStartedData{Name: "approval", Position: 0, Deadline: history.Never},
		"timer":    history.TimerStartedData{Position: 1, FireAt: historytest.Base.Add(time.Hour)},
		"children": history.ChildWaitStartedData{Positions: []int{0}, Count: 1},
	} {
		state, events := rebaseCase(t, historytest.E{Data: history.CancelRequestedData{By: "ops", Reason: "fraud"}})
		payloads := []history.Payload{history.StepCompletedData{Position: 0, Name: "ask"}, wait}
		if _, ok := wait.(history.ChildWaitStartedData); ok {
			payloads = []history.Payload{history.ChildStartedData{Position: 0, ChildID: "c", TaskType: "child", TypeVersion: 1}, wait}
		}
		p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: payloads}
		rebased, ok := rebaseOntoRequests(p, events)
		require.True(t, ok, name)
		require.IsType(t, history.TaskReleasedData{}, rebased.Payloads[1], name)
		require.True(t, canFollow(rebased.State, 1, rebased.Payloads), name)
		next, err := history.ApplyAll(rebased.State, asEvents(rebased.State.LastSeq, rebased.Payloads))
		require.NoError(t, err, name)
		require.Equal(t, history.StatusPending, next.Status, name)
		require.True(t, next.RunAt.Before(history.Never), "%s: due, not parked: %s", name, next.RunAt)
		require.True(t, next.CancelRequested, name)
	}
}

func TestRebaseTakesTheLogFromAfterTheStateOrWhole(t *testing.T) {
	t.Parallel()
	state, events := rebaseCase(t, historytest.Signal("approval", `1`, ""), historytest.Signal("other", `2`, ""))
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{
		history.StepCompletedData{Position: 0, Name: "reserve"},
	}}
	whole, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	tail, ok := rebaseOntoRequests(p, events[state.LastSeq:])
	require.True(t, ok, "the events after the state (what EventListAfter reads)")
	require.Equal(t, whole.State, tail.State)
	require.Len(t, tail.State.Signals, 2)

	_, ok = rebaseOntoRequests(p, events[state.LastSeq+1:])
	require.False(t, ok, "a tail that skips an event does not follow the state")
	_, ok = rebaseOntoRequests(p, events[:state.LastSeq-1])
	require.False(t, ok, "a whole log shorter than the state")
}

// asEvents numbers payloads as the attempt's events after seq.
func asEvents(seq int64, payloads []history.Payload) []history.Event {
	out := make([]history.Event, len(payloads))
	for i, d := range payloads {
		out[i] = history.Event{Seq: seq + int64(i) + 1, At: historytest.Base.Add(time.Minute), Attempt: 1, Data: d}
	}
	return out
}

// A fork made of a running task (task_forked) changes nothing the attempt
// depends on: its append is rebased onto it as it is.
func TestRebaseOverAForkKeepsTheAppend(t *testing.T) {
	t.Parallel()
	running := historytest.Build(historytest.Scheduled(), historytest.Started(1, 1), historytest.Step(1, 0, "reserve"))
	state, err := history.Replay(running)
	require.NoError(t, err)
	events := append(running, history.Event{Seq: 4, At: running[2].At, Data: history.TaskForkedData{ForkTaskID: "fork-1", Position: 0, By: "ops"}})
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{
		history.StepCompletedData{Position: 1, Name: "charge"}, history.TaskCompletedData{},
	}}
	rebased, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.Equal(t, p.Payloads, rebased.Payloads)
	require.Equal(t, []history.Fork{{TaskID: "fork-1", Position: 0}}, rebased.State.Forks)
}

// A select's wait raced by a signal of one of its names is handed back,
// as a receive's is; by a signal of another name, it is kept.
func TestRebaseTurnsASelectWaitForASignalThatCameIntoAHandBack(t *testing.T) {
	t.Parallel()
	state, events := rebaseCase(t, historytest.Signal("cancel", `1`, ""))
	wait := history.WaitStartedData{Position: 0, Deadline: historytest.Base.Add(time.Hour),
		Select: &history.SelectWait{Signals: []string{"approval", "cancel"}}}
	p := &store.EventAppendParams{State: state, Epoch: 1, Attempt: 1, Payloads: []history.Payload{wait}}
	rebased, ok := rebaseOntoRequests(p, events)
	require.True(t, ok)
	released, isRelease := rebased.Payloads[0].(history.TaskReleasedData)
	require.True(t, isRelease, "got %T", rebased.Payloads[0])
	require.Contains(t, released.Reason, `signal "cancel"`)

	wait.Select = &history.SelectWait{Signals: []string{"approval"}}
	p.Payloads[0] = wait
	rebased, ok = rebaseOntoRequests(p, events)
	require.True(t, ok)
	require.IsType(t, history.WaitStartedData{}, rebased.Payloads[0])
}
