package sdk

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// The kinds of [Waiting].
const (
	WaitingSignal   = "signal"   // a receive (workflow.Receive, an approval) waits for a signal of Name
	WaitingChildren = "children" // the workflow waits for Children of its child workflows to finish
	WaitingTimer    = "timer"    // the workflow sleeps (workflow.Sleep) until Deadline
)

// Waiting is what a pending task waits for: its workflow ended its
// attempt in a wait, and the task runs again when that ends. The status
// stays pending (the history's status); Waiting says why it is not due.
type Waiting struct {
	// Kind is [WaitingSignal], [WaitingChildren] or [WaitingTimer].
	Kind string `json:"kind"`
	// Name is the signal awaited (WaitingSignal).
	Name string `json:"name,omitempty"`
	// Children is how many of the awaited children must finish, Of how
	// many are awaited and Finished how many of them have
	// (WaitingChildren).
	Children int `json:"children,omitempty"`
	Of       int `json:"of,omitempty"`
	Finished int `json:"finished,omitempty"`
	// Deadline is when the wait ends without what it waits for: a
	// receive's deadline, a sleep's end, the task's own deadline for
	// children; nil when none.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// waitingOf reads what a task in state waits for, or nil.
func waitingOf(state history.State) *Waiting {
	if state.Status != history.StatusPending {
		return nil
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() || !t.Before(history.Never) {
			return nil
		}
		t = t.UTC()
		return &t
	}
	switch {
	case state.Wait != nil:
		return &Waiting{Kind: WaitingSignal, Name: state.Wait.Name, Deadline: at(state.Wait.Deadline)}
	case state.ChildWait != nil:
		w := state.ChildWait
		return &Waiting{Kind: WaitingChildren, Children: max(w.Count, 1), Of: len(w.Positions), Finished: w.Finished, Deadline: at(state.RunAt)}
	case state.Timer != nil:
		return &Waiting{Kind: WaitingTimer, Deadline: at(state.Timer.FireAt)}
	}
	return nil
}

// setWaiting fills in Waiting for the tasks among infos that may be
// waiting: pending and due later (a wait makes its task due at its
// deadline, history.Never without one). The tasks row does not say why a
// task is not due, so their histories are read, in one read, and
// replayed; a task due now (about to run, or woken by a cancel) reads
// nothing.
func (c *Client) setWaiting(ctx context.Context, infos []*TaskInfo) error {
	now := time.Now()
	var ids []uuid.UUID
	for _, info := range infos {
		if info.Status == history.StatusPending && info.RunAt.After(now) {
			ids = append(ids, info.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	histories, err := c.store.EventListByTasks(ctx, ids)
	if err != nil {
		return err
	}
	for _, info := range infos {
		events := histories[info.ID]
		if len(events) == 0 {
			continue
		}
		state, err := history.Replay(events)
		if err != nil {
			continue // the projection is what Get answers; a history it cannot fold waits for nothing it can tell
		}
		info.Waiting = waitingOf(state)
	}
	return nil
}
