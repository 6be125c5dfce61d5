package interpreter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// selTask is a task's history kept in memory, as mailTask, with children:
// its attempts start the children the run asks for, and a test finishes
// them.
type selTask struct {
	*mailTask
}

func newSelTask(t *testing.T) *selTask { return &selTask{newMailTask(t)} }

func (m *selTask) finishChild(pos int, output string) {
	m.t.Helper()
	m.apply(0, history.ChildFinishedData{Position: pos, ChildID: fmt.Sprintf("child-%d", pos), Status: history.StatusCompleted, Output: json.RawMessage(output)})
}

// params are the parameters of a run of attempt over the task's state.
func (m *selTask) params(attempt int) interpreter.RunParams {
	p := interpreter.StateParams("task-1", m.state)
	p.Attempt, p.Context = attempt, context.Background()
	p.Now = func() time.Time { return m.now }
	p.Mailbox = func() interpreter.Mailbox { return interpreter.MailboxOf(m.state) }
	p.Children = func() []history.Child { return m.state.Children }
	p.Record = func(r history.Payload) error { m.apply(attempt, r); return nil }
	p.StartChildren = func(reqs []interpreter.ChildRequest) error {
		for _, r := range reqs {
			m.apply(attempt, history.ChildStartedData{Position: r.Position, ChildID: fmt.Sprintf("child-%d", r.Position), TaskType: r.TaskType})
		}
		return nil
	}
	return p
}

// attempt runs fn in a new attempt and records its outcome, as a worker
// would: wait_started for a wait, task_completed for a result.
func (m *selTask) attempt(fn interpreter.Func) interpreter.Result {
	m.t.Helper()
	attempt := m.state.Attempt + 1
	m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: m.state.Lease.Epoch + 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	res := interpreter.Run(m.params(attempt), fn, nil)
	if res.Pending != nil {
		m.apply(attempt, res.Pending)
	}
	var wait *interpreter.WaitRequest
	switch {
	case errors.As(res.Err, &wait):
		m.apply(attempt, history.WaitStartedData{Name: wait.Name, Position: wait.Position, Deadline: wait.Deadline, Select: wait.Select})
	case res.Err == nil:
		m.apply(attempt, history.TaskCompletedData{Output: res.Output})
	}
	return res
}

// waitsOnAll is the workflow of the issue: it starts a child, then selects
// over a signal, the child and a timer of an hour, and returns which won
// with what it carried.
var waitsOnAll = interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
	child, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "review"})
	if err != nil {
		return "", err
	}
	sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
		{Kind: history.SelectSignal, Signal: "approval"},
		{Kind: history.SelectChild, Child: child},
		{Kind: history.SelectTimer, Timer: time.Hour},
	})
	if err != nil {
		return "", err
	}
	switch sel.Index {
	case 0:
		return "signal " + string(sel.Signal.Payload), nil
	case 1:
		out, err := interpreter.ChildResult(ctx, child)
		return "child " + string(out), err
	}
	return "timer", nil
})

func requireDone(t *testing.T, res interpreter.Result, want string) {
	t.Helper()
	require.NoError(t, res.Err)
	require.JSONEq(t, fmt.Sprintf("%q", want), string(res.Output))
}

func requireSelectWait(t *testing.T, res interpreter.Result) *interpreter.WaitRequest {
	t.Helper()
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.NotNil(t, wait.Select, "a select's wait")
	return wait
}

func TestSelectSignalWins(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	m.signal("approval", `"yes"`)
	requireDone(t, m.attempt(waitsOnAll), `signal "yes"`)
	require.Equal(t, []history.SelectMatch{{Position: 0, Case: 0, Kind: history.SelectSignal, Name: "approval", Seq: 2}}, m.state.Selects)
}

func TestSelectWaitsOnAllThenTheChildWins(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	wait := requireSelectWait(t, m.attempt(waitsOnAll))
	require.Equal(t, &history.SelectWait{Signals: []string{"approval"}, Children: []int{0}}, wait.Select)
	require.Equal(t, m.now.Add(time.Hour), wait.Deadline, "the timer is the wait's deadline")
	require.Equal(t, m.now.Add(time.Hour), m.state.RunAt)

	m.now = m.now.Add(time.Minute)
	m.signal("other", `1`) // not a case: the task still waits
	require.NotNil(t, m.state.Wait)
	m.finishChild(0, `"reviewed"`)
	require.Nil(t, m.state.Wait, "the child's end ends the wait")
	require.Equal(t, m.now, m.state.RunAt, "due at once: the timer's deadline is gone")

	requireDone(t, m.attempt(waitsOnAll), `child "reviewed"`)
	require.Equal(t, history.SelectChild, m.state.Selects[0].Kind)
}

func TestSelectTimerWins(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	requireSelectWait(t, m.attempt(waitsOnAll))
	m.now = m.now.Add(time.Hour)
	requireDone(t, m.attempt(waitsOnAll), "timer")
	require.Equal(t, []history.SelectMatch{{Position: 0, Case: 2, Kind: history.SelectTimer}}, m.state.Selects)
}

func TestSelectSignalWinsAfterWaiting(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	requireSelectWait(t, m.attempt(waitsOnAll))
	m.signal("approval", `"late yes"`)
	require.Nil(t, m.state.Wait)
	requireDone(t, m.attempt(waitsOnAll), `signal "late yes"`)
}

// Once the signal's win is recorded, the child finishing and the timer
// passing change nothing: a run from the history (an attempt after a
// crash, a strict replay) takes the recorded case.
func TestSelectReplayTakesTheRecordedCase(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	m.signal("approval", `"yes"`)
	attempt := m.state.Attempt + 1
	m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	// The attempt records its decision, then its worker dies before the
	// outcome is written.
	res := interpreter.Run(m.params(attempt), waitsOnAll, nil)
	requireDone(t, res, `signal "yes"`)
	require.Len(t, m.state.Selects, 1)
	m.apply(attempt, history.LeaseExpiredData{WorkerID: "w", LeaseEpoch: 1, NextRunAt: m.now})

	// Meanwhile the other two become ready, the child ahead of the signal
	// in no way that matters now.
	m.finishChild(0, `"reviewed"`)
	m.now = m.now.Add(2 * time.Hour)

	requireDone(t, m.attempt(waitsOnAll), `signal "yes"`)
	require.Len(t, m.state.Selects, 1, "replayed, not decided again")
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, waitsOnAll)
	require.NoError(t, err)
	require.Nil(t, nd)
}

// When several cases are ready, the one whose event came first wins,
// whatever the case order.
func TestSelectTieGoesToTheFirstEvent(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	requireSelectWait(t, m.attempt(waitsOnAll))
	m.finishChild(0, `"reviewed"`)
	m.signal("approval", `"yes"`)
	m.now = m.now.Add(2 * time.Hour) // the timer is due too: it comes last
	requireDone(t, m.attempt(waitsOnAll), `child "reviewed"`)

	m = newSelTask(t)
	requireSelectWait(t, m.attempt(waitsOnAll))
	m.signal("approval", `"yes"`)
	m.finishChild(0, `"reviewed"`)
	requireDone(t, m.attempt(waitsOnAll), `signal "yes"`)
}

// A signal case that loses takes nothing: the signal stays for a later
// receive of its name.
func TestSelectLosingSignalStaysForALaterReceive(t *testing.T) {
	t.Parallel()
	wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) ([]string, error) {
		child, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "review"})
		if err != nil {
			return nil, err
		}
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
			{Kind: history.SelectSignal, Signal: "approval"},
			{Kind: history.SelectChild, Child: child},
		})
		if err != nil {
			return nil, err
		}
		v, ok, err := interpreter.Receive[string](ctx, "approval", time.Hour)
		if err != nil {
			return nil, err
		}
		return []string{fmt.Sprint(sel.Index), v, fmt.Sprint(ok)}, nil
	})
	m := newSelTask(t)
	requireSelectWait(t, m.attempt(wf))
	m.finishChild(0, `"reviewed"`)
	m.signal("approval", `"yes"`)
	res := m.attempt(wf)
	require.NoError(t, res.Err)
	require.JSONEq(t, `["1","yes","true"]`, string(res.Output), "the child won; the receive took the signal")
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, wf)
	require.NoError(t, err)
	require.Nil(t, nd)
}

func TestSelectFutureWins(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		f := interpreter.Go(ctx, "slow", func(context.Context) (string, error) {
			<-release
			return "done", nil
		}, nil)
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
			{Kind: history.SelectSignal, Signal: "approval"},
			{Kind: history.SelectFuture, Future: f},
		})
		if err != nil {
			return "", err
		}
		if sel.Index == 1 {
			return f.Get(ctx)
		}
		return "signal", nil
	})
	m := newSelTask(t)
	close(release) // the select waits within the attempt for the step
	requireDone(t, m.attempt(wf), "done")
	require.Equal(t, []history.SelectMatch{{Position: 0, Case: 1, Kind: history.SelectFuture, Step: 0}}, m.state.Selects)
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, wf)
	require.NoError(t, err)
	require.Nil(t, nd)
}

// A timer of 0 is due at once: it wins unless something else is ready,
// and nothing waits.
func TestSelectZeroTimerPolls(t *testing.T) {
	t.Parallel()
	wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (int, error) {
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
			{Kind: history.SelectTimer, Timer: 0},
			{Kind: history.SelectSignal, Signal: "approval"},
		})
		return sel.Index, err
	})
	m := newSelTask(t)
	res := m.attempt(wf)
	require.NoError(t, res.Err)
	require.JSONEq(t, `0`, string(res.Output))

	m = newSelTask(t)
	m.signal("approval", `"yes"`)
	res = m.attempt(wf)
	require.NoError(t, res.Err)
	require.JSONEq(t, `1`, string(res.Output), "a signal there beats a timer due")
}

func TestSelectChangedCaseIsNondeterministic(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	m.signal("approval", `"yes"`)
	requireDone(t, m.attempt(waitsOnAll), `signal "yes"`)

	changed := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (int, error) {
		if _, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "review"}); err != nil {
			return 0, err
		}
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
			{Kind: history.SelectTimer, Timer: time.Hour},
			{Kind: history.SelectSignal, Signal: "approval"},
		})
		return sel.Index, err
	})
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, changed)
	require.NoError(t, err)
	require.Equal(t, &interpreter.NondeterminismError{Kind: "select", Position: 0, Recorded: `case 0 (signal "approval")`, Called: "case 0 (timer)"}, nd)

	receives := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if _, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "review"}); err != nil {
			return "", err
		}
		v, _, err := interpreter.Receive[string](ctx, "approval", time.Hour)
		return v, err
	})
	nd, err = interpreter.Replay(context.Background(), "task-1", m.state, receives)
	require.NoError(t, err)
	require.Equal(t, "select", nd.Kind, "a receive where the history decided a select")
}

// A strict replay of a task waiting in a select stops there; a workflow
// that no longer selects there is refused.
func TestSelectStrictReplayOfAWaitingTask(t *testing.T) {
	t.Parallel()
	m := newSelTask(t)
	requireSelectWait(t, m.attempt(waitsOnAll))
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, waitsOnAll)
	require.NoError(t, err)
	require.Nil(t, nd)

	receives := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if _, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "review"}); err != nil {
			return "", err
		}
		v, _, err := interpreter.Receive[string](ctx, "approval", time.Hour)
		return v, err
	})
	nd, err = interpreter.Replay(context.Background(), "task-1", m.state, receives)
	require.NoError(t, err)
	require.Equal(t, &interpreter.NondeterminismError{Kind: "receive", Position: 0, Recorded: "(select)", Called: `(receive of "approval")`}, nd)
}

func TestSelectRefusesBadCases(t *testing.T) {
	t.Parallel()
	for name, cases := range map[string][]interpreter.SelectCase{
		"none":          nil,
		"no name":       {{Kind: history.SelectSignal}},
		"unknown child": {{Kind: history.SelectChild, Child: interpreter.ChildHandle{Position: 3}}},
		"no future":     {{Kind: history.SelectFuture}},
		"bad kind":      {{Kind: "pigeon"}},
		"too many":      make([]interpreter.SelectCase, history.MaxSelectCases+1),
	} {
		wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (int, error) {
			sel, err := interpreter.Select(ctx, cases)
			return sel.Index, err
		})
		res := newSelTask(t).attempt(wf)
		require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts, name)
	}
}

// A select on a child the cap holds back waits on the running ones too:
// one's end starts it, and the select waits again, to the same deadline.
func TestSelectOnAHeldBackChild(t *testing.T) {
	t.Parallel()
	wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if _, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "first"}); err != nil {
			return "", err
		}
		held, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "second"})
		if err != nil {
			return "", err
		}
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{
			{Kind: history.SelectChild, Child: held},
			{Kind: history.SelectTimer, Timer: time.Hour},
		})
		return fmt.Sprint(sel.Index), err
	})
	m := newSelTask(t)
	run := func() interpreter.Result {
		attempt := m.state.Attempt + 1
		m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: m.state.Lease.Epoch + 1, LeaseExpiresAt: m.now.Add(time.Minute)})
		p := m.params(attempt)
		p.MaxRunningChildren = 1
		res := interpreter.Run(p, wf, nil)
		var wait *interpreter.WaitRequest
		switch {
		case errors.As(res.Err, &wait):
			m.apply(attempt, history.WaitStartedData{Position: wait.Position, Deadline: wait.Deadline, Select: wait.Select})
		case res.Err == nil:
			m.apply(attempt, history.TaskCompletedData{Output: res.Output})
		}
		return res
	}
	wait := requireSelectWait(t, run())
	require.Equal(t, []int{0}, wait.Select.Children, "the running child, whose end makes room")
	deadline := wait.Deadline
	m.now = m.now.Add(time.Minute)
	m.finishChild(0, `"first"`)
	wait = requireSelectWait(t, run())
	require.Equal(t, []int{1}, wait.Select.Children, "started now, and awaited")
	require.Equal(t, deadline, wait.Deadline, "the timer counts from the first wait")
	m.finishChild(1, `"second"`)
	res := run()
	require.NoError(t, res.Err)
	require.JSONEq(t, `"0"`, string(res.Output))
}
