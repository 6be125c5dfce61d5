package sdk

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

// waitingOf names each wait a replayed task can be in: a signal's, its
// children's (how many must finish, of how many, how many have), a
// sleep's; none once the attempt runs again.
func TestWaitingOfEachKindOfWait(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lease := t0.Add(time.Minute)
	start := []history.Event{
		{Seq: 1, At: t0, Data: history.TaskScheduledData{TaskType: "t", TypeVersion: 1, Queue: "default", RunAt: t0}},
		{Seq: 2, At: t0, Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w", LeaseEpoch: 1, LeaseExpiresAt: lease}},
	}
	with := func(data ...history.Payload) []history.Event {
		events := append([]history.Event(nil), start...)
		for _, d := range data {
			attempt := 1
			if _, ok := d.(history.ChildFinishedData); ok {
				attempt = 0
			}
			events = append(events, history.Event{Seq: int64(len(events) + 1), At: t0, Attempt: attempt, Data: d})
		}
		return events
	}
	fire, deadline := t0.Add(time.Hour), t0.Add(2*time.Hour)
	for name, c := range map[string]struct {
		events []history.Event
		want   *Waiting
	}{
		"running": {start, nil},
		"signal": {with(history.WaitStartedData{Name: "approval", Position: 0, Deadline: deadline}),
			&Waiting{Kind: WaitingSignal, Name: "approval", Deadline: &deadline}},
		"signal answered": {with(history.WaitStartedData{Name: "approval", Position: 0, Deadline: deadline},
			history.SignalReceivedData{Name: "approval"}), nil},
		"timer": {with(history.TimerStartedData{Position: 0, FireAt: fire}), &Waiting{Kind: WaitingTimer, Deadline: &fire}},
		"select": {with(history.ChildStartedData{Position: 0, ChildID: "a", TaskType: "c"},
			history.WaitStartedData{Position: 0, Deadline: deadline, Select: &history.SelectWait{Signals: []string{"approval", "cancel"}, Children: []int{0}}},
			history.SignalReceivedData{Name: "other"}),
			&Waiting{Kind: WaitingSelect, Signals: []string{"approval", "cancel"}, Of: 1, Deadline: &deadline}},
		"select answered by a signal": {with(
			history.WaitStartedData{Position: 0, Deadline: deadline, Select: &history.SelectWait{Signals: []string{"approval", "cancel"}}},
			history.SignalReceivedData{Name: "cancel"}), nil},
		"select answered by a child": {with(history.ChildStartedData{Position: 0, ChildID: "a", TaskType: "c"},
			history.WaitStartedData{Position: 0, Deadline: history.Never, Select: &history.SelectWait{Signals: []string{"approval"}, Children: []int{0}}},
			history.ChildFinishedData{Position: 0, ChildID: "a", Status: history.StatusCompleted}), nil},
		"children": {with(
			history.ChildStartedData{Position: 0, ChildID: "a", TaskType: "c"},
			history.ChildStartedData{Position: 1, ChildID: "b", TaskType: "c"},
			history.ChildStartedData{Position: 2, ChildID: "c", TaskType: "c"},
			history.ChildWaitStartedData{Positions: []int{0, 1, 2}, Count: 2},
			history.ChildFinishedData{Position: 1, ChildID: "b", Status: history.StatusCompleted},
		), &Waiting{Kind: WaitingChildren, Children: 2, Of: 3, Finished: 1}},
	} {
		state, err := history.Replay(c.events)
		require.NoError(t, err, name)
		require.Equal(t, c.want, waitingOf(state), name)
		var tail waitTail
		for _, e := range c.events {
			tail.apply(e)
		}
		require.Equal(t, c.want, tail.waiting(state.RunAt), name+": the tail scan")
	}
}

// waitingOf reads what a task in state waits for, or nil: the replay's
// answer, which the tail scan Get and List use must give.
func waitingOf(state history.State) *Waiting {
	if state.Status != history.StatusPending {
		return nil
	}
	switch {
	case state.Wait != nil && state.Wait.Select != nil:
		return &Waiting{Kind: WaitingSelect, Signals: state.Wait.Select.Signals, Of: len(state.Wait.Select.Children), Deadline: waitDeadline(state.Wait.Deadline)}
	case state.Wait != nil:
		return &Waiting{Kind: WaitingSignal, Name: state.Wait.Name, Deadline: waitDeadline(state.Wait.Deadline)}
	case state.ChildWait != nil:
		w := state.ChildWait
		return &Waiting{Kind: WaitingChildren, Children: max(w.Count, 1), Of: len(w.Positions), Finished: w.Finished, Deadline: waitDeadline(state.RunAt)}
	case state.Timer != nil:
		return &Waiting{Kind: WaitingTimer, Deadline: waitDeadline(state.Timer.FireAt)}
	}
	return nil
}
