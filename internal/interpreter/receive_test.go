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

// mailTask is a task's history kept in memory: attempts run a workflow
// against it as a worker would, and record what the run asks for.
type mailTask struct {
	t     *testing.T
	state history.State
	now   time.Time
}

func newMailTask(t *testing.T) *mailTask {
	m := &mailTask{t: t, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.apply(0, history.TaskScheduledData{TaskType: "approve", RunAt: m.now})
	return m
}

func (m *mailTask) apply(attempt int, p history.Payload) {
	m.t.Helper()
	next, err := history.Apply(m.state, history.Event{Seq: m.state.LastSeq + 1, At: m.now, Attempt: attempt, Data: p})
	require.NoError(m.t, err, "apply %s", p.EventType())
	m.state = next
}

func (m *mailTask) signal(name, payload string) {
	m.t.Helper()
	m.apply(0, history.SignalReceivedData{Name: name, Payload: json.RawMessage(payload)})
}

// attempt runs fn in a new attempt and records its outcome: wait_started
// for a wait, task_completed for a result. It returns the run's result.
func (m *mailTask) attempt(fn interpreter.Func) interpreter.Result {
	m.t.Helper()
	attempt := m.state.Attempt + 1
	m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: m.state.Lease.Epoch + 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: attempt, Steps: m.state.Steps, Context: context.Background(),
		Timer: m.state.Timer, Mailbox: func() interpreter.Mailbox { return interpreter.MailboxOf(m.state) }, Now: func() time.Time { return m.now },
		Record: func(p history.Payload) error { m.apply(attempt, p); return nil },
	}, fn, nil)
	if res.Pending != nil {
		m.apply(attempt, res.Pending)
	}
	var wait *interpreter.WaitRequest
	switch {
	case errors.As(res.Err, &wait):
		m.apply(attempt, history.WaitStartedData{Name: wait.Name, Position: wait.Position, Deadline: wait.Deadline})
	case res.Err == nil:
		m.apply(attempt, history.TaskCompletedData{Output: res.Output})
	}
	return res
}

// got is what a receive returned.
type got struct {
	Value string
	OK    bool
}

// receives returns a workflow that receives each of names in turn, with
// timeout, and returns what each receive returned.
func receives(timeout time.Duration, names ...string) interpreter.Func {
	return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) ([]got, error) {
		var out []got
		for _, name := range names {
			v, ok, err := interpreter.Receive[string](ctx, name, timeout)
			if err != nil {
				return nil, err
			}
			out = append(out, got{v, ok})
		}
		return out, nil
	})
}

func requireOutput(t *testing.T, res interpreter.Result, want []got) {
	t.Helper()
	require.NoError(t, res.Err)
	var out []got
	require.NoError(t, json.Unmarshal(res.Output, &out))
	require.Equal(t, want, out)
}

func TestReceiveTakesASignalSentBeforeIt(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	m.signal("approval", `"yes"`)
	res := m.attempt(receives(time.Hour, "approval"))
	requireOutput(t, res, []got{{"yes", true}})
	require.Empty(t, m.state.Waits, "a signal already there is taken without waiting")
	require.Equal(t, history.StatusCompleted, m.state.Status)
}

func TestReceiveWaitsThenTakesTheSignal(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	res := m.attempt(receives(time.Hour, "approval"))
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Equal(t, interpreter.WaitRequest{Position: 0, Name: "approval", Deadline: m.now.Add(time.Hour)}, *wait)
	require.Equal(t, history.StatusPending, m.state.Status)
	require.Equal(t, m.now.Add(time.Hour), m.state.RunAt, "not due before a signal or the deadline")

	m.now = m.now.Add(time.Minute)
	m.signal("approval", `"yes"`)
	require.Equal(t, m.now, m.state.RunAt, "the signal makes it due at once")
	requireOutput(t, m.attempt(receives(time.Hour, "approval")), []got{{"yes", true}})
}

func TestReceiveTimesOutAndALateSignalWaitsForTheNextReceive(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	two := receives(time.Hour, "approval", "approval")
	m.attempt(two)
	m.now = m.now.Add(time.Hour)
	res := m.attempt(two) // woken by the deadline: times out, then the second receive waits
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Equal(t, 1, wait.Position)
	require.True(t, m.state.Waits[0].TimedOut, "wait_timed_out recorded")

	m.signal("approval", `"late"`)
	requireOutput(t, m.attempt(two), []got{{"", false}, {"late", true}})
}

func TestReceivesOfANameTakeItsSignalsInOrder(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	m.signal("b", `"b1"`)
	m.signal("a", `"a1"`)
	m.signal("a", `"a2"`)
	requireOutput(t, m.attempt(receives(time.Hour, "a", "b", "a")), []got{{"a1", true}, {"b1", true}, {"a2", true}})
}

func TestReorderedReceiveIsNondeterministic(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	m.signal("a", `"a1"`)
	m.attempt(receives(time.Hour, "a", "b")) // takes a1, waits for b at position 1
	m.signal("b", `"b1"`)
	res := m.attempt(receives(time.Hour, "b", "a")) // b at 0 takes b1; a at 1 meets the recorded b
	require.ErrorIs(t, res.Err, interpreter.ErrNondeterministic)
	require.Contains(t, res.Err.Error(), `receive 1: history recorded a receive of signal "b", workflow called a receive of "a"`)
}

func TestReceiveNeedsANameAndATimeout(t *testing.T) {
	t.Parallel()
	for _, fn := range []interpreter.Func{receives(0, "approval"), receives(time.Hour, "")} {
		m := newMailTask(t)
		res := m.attempt(fn)
		require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts)
	}
}

func TestReceiveStopsWhenTheWorkerStops(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	close(stopping)
	res := interpreter.Run(interpreter.RunParams{
		TaskID: "task-1", Attempt: 1, Context: context.Background(), Stopping: stopping,
		Record: func(history.Payload) error { return nil },
	}, receives(time.Hour, "approval"), nil)
	require.ErrorIs(t, res.Err, interpreter.ErrStopping, "a receive is a checkpoint")
}

// A receive's records have no step position: a step after a timed-out
// receive, and futures before a receive that waits, keep their positions.
func TestReceiveAndStepsKeepTheirPositions(t *testing.T) {
	t.Parallel()
	m := newMailTask(t)
	ran := map[string]int{}
	wf := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		page := interpreter.Go(ctx, "ocr", func(context.Context) (string, error) { ran["ocr"]++; return "text", nil }, nil)
		if _, _, err := interpreter.Receive[string](ctx, "review", time.Minute); err != nil {
			return "", err
		}
		text, err := page.Get(ctx)
		if err != nil {
			return "", err
		}
		return interpreter.Step(ctx, "send", func(context.Context) (string, error) { ran["send"]++; return "sent " + text, nil }, nil)
	})
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, m.attempt(wf).Err, &wait, "the receive waits")
	require.Len(t, m.state.Steps, 1, "the future started before the wait is recorded before it")

	m.now = m.now.Add(time.Minute)
	res := m.attempt(wf) // the deadline: the receive times out, then the step runs
	require.NoError(t, res.Err)
	require.Equal(t, map[string]int{"ocr": 1, "send": 1}, ran)
	require.Len(t, m.state.Steps, 2)
	require.Equal(t, "send", m.state.Steps[1].Name)
	require.True(t, m.state.Waits[0].TimedOut)
	require.Equal(t, history.StatusCompleted, m.state.Status)
}
