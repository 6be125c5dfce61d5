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

// updTask is a task's history kept in memory, with updates: attempts run
// a workflow against it as a worker would and record what the run asks
// for.
type updTask struct {
	*mailTask
}

func newUpdTask(t *testing.T) *updTask { return &updTask{newMailTask(t)} }

func (m *updTask) params(attempt int) interpreter.RunParams {
	p := interpreter.StateParams("task-1", m.state)
	p.Attempt, p.Context, p.Now = attempt, context.Background(), func() time.Time { return m.now }
	p.Mailbox = func() interpreter.Mailbox { return interpreter.MailboxOf(m.state) }
	p.Updates = func() []history.Update { return m.state.Updates }
	p.Record = func(pl history.Payload) error { m.apply(attempt, pl); return nil }
	return p
}

// attempt runs fn in a new attempt and records its outcome.
func (m *updTask) attempt(fn interpreter.Func) interpreter.Result {
	m.t.Helper()
	attempt := m.state.Attempt + 1
	m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: m.state.Lease.Epoch + 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	res := interpreter.Run(m.params(attempt), fn, nil)
	if res.Pending != nil {
		m.apply(attempt, res.Pending)
	}
	var wait *interpreter.WaitRequest
	var sleep *interpreter.SleepRequest
	switch {
	case errors.As(res.Err, &wait):
		m.apply(attempt, history.WaitStartedData{Name: wait.Name, Position: wait.Position, Deadline: wait.Deadline, Select: wait.Select})
	case errors.As(res.Err, &sleep):
		m.apply(attempt, history.TimerStartedData{Position: sleep.Position, FireAt: sleep.FireAt})
	case res.Err == nil:
		m.apply(attempt, history.TaskCompletedData{Output: res.Output})
	}
	return res
}

// validate inspects fn at the frontier and validates the update there.
func (m *updTask) validate(fn interpreter.Func, name, args string) error {
	return interpreter.Inspect(context.Background(), "task-1", m.state, fn, func(in *interpreter.Inspection) error {
		return in.ValidateUpdate(name, json.RawMessage(args))
	})
}

func (m *updTask) accept(id, name, args string) {
	m.t.Helper()
	m.apply(0, history.UpdateAcceptedData{UpdateID: id, Name: name, Args: json.RawMessage(args), RequestedBy: "test"})
}

// counter registers "add", which adds its args to a total (refusing
// negative numbers), a step, and a receive of "go"; it returns the total
// and what steps it ran.
func counter(steps *[]string) interpreter.Func {
	return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (int, error) {
		total := 0
		_ = interpreter.SetUpdate(ctx, "add", interpreter.UpdateHandler{
			Handler: func(ctx interpreter.Context, raw json.RawMessage) (json.RawMessage, error) {
				var n int
				if err := json.Unmarshal(raw, &n); err != nil {
					return nil, err
				}
				if n == 13 {
					_, err := interpreter.Step(ctx, "inside", func(context.Context) (int, error) { return 0, nil }, nil)
					return nil, err
				}
				if n == 99 {
					panic("ninety-nine")
				}
				total += n
				return json.Marshal(total)
			},
			Validator: func(raw json.RawMessage) error {
				var n int
				if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
					return errors.Newf("add %s: not a count", raw)
				}
				return nil
			},
		})
		if _, err := interpreter.Step(ctx, "first", func(context.Context) (int, error) { *steps = append(*steps, "first"); return 1, nil }, nil); err != nil {
			return 0, err
		}
		if _, _, err := interpreter.Receive[string](ctx, "go", time.Hour); err != nil {
			return 0, err
		}
		if total > 10 {
			// The update changed the workflow's course.
			if _, err := interpreter.Step(ctx, "big", func(context.Context) (int, error) { *steps = append(*steps, "big"); return 1, nil }, nil); err != nil {
				return 0, err
			}
		}
		return total, nil
	})
}

func TestUpdateAppliedWhileWaitingAndReplayed(t *testing.T) {
	t.Parallel()
	m := newUpdTask(t)
	var steps []string
	fn := counter(&steps)
	res := m.attempt(fn)
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.Equal(t, []string{"first"}, steps)

	// Validation: at the frontier (the receive's wait), no step runs.
	require.ErrorContains(t, m.validate(fn, "add", "-1"), "not a count")
	require.ErrorIs(t, m.validate(fn, "nope", "1"), interpreter.ErrHandlerNotFound)
	require.ErrorContains(t, m.validate(fn, "add", `"x"`), "not a count")
	require.NoError(t, m.validate(fn, "add", "12"))
	require.Equal(t, []string{"first"}, steps)

	// Accepted: the waiting task is due at once.
	m.now = m.now.Add(time.Second)
	m.accept("u1", "add", "12")
	require.Equal(t, m.now, m.state.RunAt)
	m.accept("u2", "add", "13") // its handler calls a step: the update fails
	m.accept("u3", "add", "99") // panics: the update fails
	m.accept("u4", "missing", "1")
	res = m.attempt(fn)
	require.ErrorAs(t, res.Err, &wait, "it waits again")
	require.Equal(t, []string{"first"}, steps)
	require.Nil(t, m.state.PendingUpdates())
	u1, _ := m.state.UpdateByID("u1")
	require.JSONEq(t, "12", string(u1.Output))
	require.Equal(t, history.UpdatePoint{Call: 1, Step: 1, Receive: 0, Child: 0}, u1.At)
	u2, _ := m.state.UpdateByID("u2")
	require.Contains(t, u2.Error.Message, "cannot call the workflow API")
	u3, _ := m.state.UpdateByID("u3")
	require.Contains(t, u3.Error.Message, "ninety-nine")
	u4, _ := m.state.UpdateByID("u4")
	require.Equal(t, "update_not_found", u4.Error.Kind)
	require.Equal(t, history.StatusPending, m.state.Status)
	require.True(t, m.state.RunAt.After(m.now), "waits again to the receive's deadline")

	// The validator sees the update applied.
	require.NoError(t, m.validate(fn, "add", "1"))

	// The signal: the replay runs the handler again where it ran, and the
	// workflow takes the branch the update opened.
	m.signal("go", `"now"`)
	res = m.attempt(fn)
	require.NoError(t, res.Err)
	require.JSONEq(t, "12", string(res.Output))
	require.Equal(t, []string{"first", "big"}, steps)

	// A strict replay of the whole history agrees.
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, fn)
	require.NoError(t, err)
	require.Nil(t, nd)

	// Code that makes another call before the handler's point does not.
	other := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (int, error) {
		_ = interpreter.SetUpdate(ctx, "add", interpreter.UpdateHandler{Handler: func(interpreter.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
		if err := interpreter.AwaitChildren(ctx, nil); err != nil {
			return 0, err
		}
		if _, err := interpreter.Step(ctx, "first", func(context.Context) (int, error) { return 1, nil }, nil); err != nil {
			return 0, err
		}
		if _, _, err := interpreter.Receive[string](ctx, "go", time.Hour); err != nil {
			return 0, err
		}
		_, err := interpreter.Step(ctx, "big", func(context.Context) (int, error) { return 1, nil }, nil)
		return 0, err
	})
	nd, err = interpreter.Replay(context.Background(), "task-1", m.state, other)
	require.NoError(t, err)
	require.NotNil(t, nd)
	require.Equal(t, "update", nd.Kind)
}

func TestUpdateWakesASleepThatSleepsAgain(t *testing.T) {
	t.Parallel()
	m := newUpdTask(t)
	var got []int
	fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) ([]int, error) {
		_ = interpreter.SetUpdate(ctx, "note", interpreter.UpdateHandler{Handler: func(_ interpreter.Context, raw json.RawMessage) (json.RawMessage, error) {
			var n int
			_ = json.Unmarshal(raw, &n)
			got = append(got, n)
			return raw, nil
		}})
		if err := interpreter.Sleep(ctx, time.Hour); err != nil {
			return nil, err
		}
		return got, nil
	})
	res := m.attempt(fn)
	var sleep *interpreter.SleepRequest
	require.ErrorAs(t, res.Err, &sleep)
	fireAt := m.state.Timer.FireAt

	m.now = m.now.Add(time.Minute)
	m.accept("n1", "note", "7")
	require.Equal(t, m.now, m.state.RunAt)
	got = nil
	res = m.attempt(fn)
	require.ErrorAs(t, res.Err, &sleep, "sleeps again")
	require.Equal(t, fireAt, sleep.FireAt)
	require.Equal(t, fireAt, m.state.RunAt)
	require.Equal(t, []int{7}, got)
	require.Equal(t, 1, m.state.Released, "a rearm uses no budget")

	m.now = fireAt
	got = nil
	res = m.attempt(fn)
	require.NoError(t, res.Err)
	require.JSONEq(t, "[7]", string(res.Output), "the handler ran again on replay, before the sleep")
}

// TestUpdateWakesASelectThatWaitsAgain: a select waiting on a signal and
// a timer is woken by an update, applies it, and waits again to the same
// deadline; the replay that decides it runs the handler again first.
func TestUpdateWakesASelectThatWaitsAgain(t *testing.T) {
	t.Parallel()
	m := newUpdTask(t)
	var notes []string
	fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) ([]string, error) {
		notes = nil
		if err := interpreter.SetUpdate(ctx, "note", interpreter.UpdateHandler{Handler: func(_ interpreter.Context, raw json.RawMessage) (json.RawMessage, error) {
			notes = append(notes, string(raw))
			return raw, nil
		}}); err != nil {
			return nil, err
		}
		sel, err := interpreter.Select(ctx, []interpreter.SelectCase{{Kind: history.SelectSignal, Signal: "go"}, {Kind: history.SelectTimer, Timer: time.Hour}})
		if err != nil {
			return nil, err
		}
		return append(notes, fmt.Sprint("case ", sel.Index)), nil
	})
	res := m.attempt(fn)
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
	require.NotNil(t, wait.Select)
	deadline := wait.Deadline

	m.now = m.now.Add(time.Minute)
	m.accept("n1", "note", `"first"`)
	require.Equal(t, m.now, m.state.RunAt, "the select's wait is woken")
	res = m.attempt(fn)
	require.ErrorAs(t, res.Err, &wait, "it waits again")
	require.Equal(t, deadline, wait.Deadline, "to the same deadline")
	require.Equal(t, []string{`"first"`}, notes)
	u, _ := m.state.UpdateByID("n1")
	require.True(t, u.Completed)

	m.signal("go", `1`)
	res = m.attempt(fn)
	require.NoError(t, res.Err)
	require.JSONEq(t, `["\"first\"","case 0"]`, string(res.Output))
	nd, err := interpreter.Replay(context.Background(), "task-1", m.state, fn)
	require.NoError(t, err)
	require.Nil(t, nd)
}
