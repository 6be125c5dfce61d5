package sdk

import (
	"context"
	"slices"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// The kinds of [Waiting].
const (
	WaitingSignal   = "signal"   // a receive (workflow.Receive, an approval) waits for a signal of Name
	WaitingChildren = "children" // the workflow waits for Children of its child workflows to finish
	WaitingTimer    = "timer"    // the workflow sleeps (workflow.Sleep) until Deadline
	WaitingSelect   = "select"   // a workflow.Select waits for a signal of one of Signals, one of Of children, or Deadline
)

// Waiting is what a pending task waits for: its workflow ended its
// attempt in a wait, and the task runs again when that ends. The status
// stays pending (the history's status); Waiting says why it is not due.
type Waiting struct {
	// Kind is [WaitingSignal], [WaitingChildren], [WaitingTimer] or
	// [WaitingSelect].
	Kind string `json:"kind"`
	// Name is the signal awaited (WaitingSignal).
	Name string `json:"name,omitempty"`
	// Signals are the signals a select awaits, any of which ends its
	// wait (WaitingSelect; Of is then how many children it awaits).
	Signals []string `json:"signals,omitempty"`
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

// How far back a task's wait is looked for: the events at the end of its
// history read to find it, one bounded page at a time, keeping only what
// the wait needs. A history's length does not bound the read (a history
// may hold 64 MiB), so a wait that began further back than this (a parent
// that saw more of its children finish, a task that took many signals of
// other names since) is not described: Waiting is nil.
const (
	waitScanOne       = 1000 // Get: one task
	waitScanListed    = 100  // List: each waiting task of the page
	waitScanPageBytes = 256 << 10
)

// setWaiting fills in Waiting for the tasks among infos that may be
// waiting: pending and due later (a wait makes its task due at its
// deadline, history.Never without one). The tasks row does not say why a
// task is not due, so the last scan events of their histories are read
// (see [waitScanOne]); a task due now (about to run, or woken by a
// cancel) reads nothing.
func (c *Client) setWaiting(ctx context.Context, infos []*TaskInfo, scan int64) error {
	now := time.Now()
	for _, info := range infos {
		if info.Status != history.StatusPending || !info.RunAt.After(now) {
			continue
		}
		w, err := c.scanWait(ctx, info, scan)
		if err != nil {
			return err
		}
		info.Waiting = w
	}
	return nil
}

// scanWait reads the last scan events of info's history, a page at a
// time, for the wait that began last and what has happened to it since.
func (c *Client) scanWait(ctx context.Context, info *TaskInfo, scan int64) (*Waiting, error) {
	var tail waitTail
	after := max(info.lastSeq-scan, 0)
	for after < info.lastSeq {
		events, err := c.store.EventListPage(ctx, &store.EventPageParams{
			Namespace: c.namespace, TaskID: info.ID, After: after,
			Limit: int(min(info.lastSeq-after, store.MaxEventPageLimit)), MaxBytes: waitScanPageBytes,
		})
		if err != nil {
			return nil, err
		}
		if len(events) == 0 {
			break
		}
		for _, e := range events {
			tail.apply(e)
		}
		after = events[len(events)-1].Seq
	}
	return tail.waiting(info.RunAt), nil
}

// waitTail is what a forward scan of a history's tail keeps: the wait
// begun last (wait_started, child_wait_started or timer_started), unless
// an attempt started after it, and the awaited children finished since.
type waitTail struct {
	signal   *history.WaitStartedData
	children *history.ChildWaitStartedData
	timer    *history.TimerStartedData
	finished int
}

func (t *waitTail) apply(e history.Event) {
	switch d := e.Data.(type) {
	case history.AttemptStartedData:
		*t = waitTail{}
	case history.WaitStartedData:
		*t = waitTail{signal: &d}
	case history.ChildWaitStartedData:
		*t = waitTail{children: &d}
	case history.TimerStartedData:
		*t = waitTail{timer: &d}
	case history.SignalReceivedData:
		// A signal of the awaited name ends the wait (the task is due),
		// as the replay's State.Wait says, whatever the clocks.
		if w := t.signal; w != nil && (d.Name == w.Name && w.Select == nil || w.Select != nil && slices.Contains(w.Select.Signals, d.Name)) {
			t.signal = nil
		}
	case history.ChildFinishedData:
		if t.children != nil && slices.Contains(t.children.Positions, d.Position) {
			t.finished++
		}
		if w := t.signal; w != nil && w.Select != nil && slices.Contains(w.Select.Children, d.Position) {
			t.signal = nil // a select's child ends its wait
		}
	}
}

// waiting is the [Waiting] the scan found, nil for none; runAt is the
// task's, the end of a wait for children.
func (t *waitTail) waiting(runAt time.Time) *Waiting {
	switch {
	case t.signal != nil && t.signal.Select != nil:
		w := t.signal
		return &Waiting{Kind: WaitingSelect, Signals: w.Select.Signals, Of: len(w.Select.Children), Deadline: waitDeadline(w.Deadline)}
	case t.signal != nil:
		return &Waiting{Kind: WaitingSignal, Name: t.signal.Name, Deadline: waitDeadline(t.signal.Deadline)}
	case t.children != nil:
		w := t.children
		return &Waiting{Kind: WaitingChildren, Children: max(w.Count, 1), Of: len(w.Positions), Finished: t.finished, Deadline: waitDeadline(runAt)}
	case t.timer != nil:
		return &Waiting{Kind: WaitingTimer, Deadline: waitDeadline(t.timer.FireAt)}
	}
	return nil
}

func waitDeadline(t time.Time) *time.Time {
	if t.IsZero() || !t.Before(history.Never) {
		return nil
	}
	t = t.UTC()
	return &t
}
