package interpreter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// patchTask is a task's history kept in memory, run attempt by attempt as
// a worker would: what a run records and the outcome it ends with (a
// wait, a sleep, a child wait, the result) are applied to its state.
type patchTask struct {
	t     *testing.T
	state history.State
	now   time.Time
	ran   map[string]int // steps executed, by name
	types []history.Type // the log's event types
}

func newPatchTask(t *testing.T) *patchTask {
	m := &patchTask{t: t, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), ran: map[string]int{}}
	m.apply(0, history.TaskScheduledData{TaskType: "intake", RunAt: m.now})
	return m
}

func (m *patchTask) apply(attempt int, p history.Payload) {
	m.t.Helper()
	next, err := history.Apply(m.state, history.Event{Seq: m.state.LastSeq + 1, At: m.now, Attempt: attempt, Data: p})
	require.NoError(m.t, err, "apply %s", p.EventType())
	m.state = next
	m.types = append(m.types, p.EventType())
}

func (m *patchTask) params(attempt int) interpreter.RunParams {
	return interpreter.RunParams{
		TaskID: "task-1", Attempt: attempt, Steps: m.state.Steps, Ahead: m.state.Ahead, Context: context.Background(),
		Timer: m.state.Timer, Patches: m.state.Patches, Now: func() time.Time { return m.now },
		Mailbox:  func() interpreter.Mailbox { return interpreter.MailboxOf(m.state) },
		Children: func() []history.Child { return m.state.Children },
		StartChildren: func(reqs []interpreter.ChildRequest) error {
			for _, r := range reqs {
				m.apply(attempt, history.ChildStartedData{Position: r.Position, ChildID: fmt.Sprintf("child-%d", r.Position), TaskType: r.TaskType})
			}
			return nil
		},
		Record: func(p history.Payload) error { m.apply(attempt, p); return nil },
	}
}

// attempt runs fn in a new attempt and records its outcome.
func (m *patchTask) attempt(fn interpreter.Func) interpreter.Result {
	m.t.Helper()
	attempt := m.state.Attempt + 1
	m.apply(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: m.state.Lease.Epoch + 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	res := interpreter.Run(m.params(attempt), fn, nil)
	if res.Pending != nil {
		m.apply(attempt, res.Pending)
	}
	var (
		wait  *interpreter.WaitRequest
		sleep *interpreter.SleepRequest
		child *interpreter.ChildWaitRequest
	)
	switch {
	case errors.As(res.Err, &wait):
		m.apply(attempt, history.WaitStartedData{Name: wait.Name, Position: wait.Position, Deadline: wait.Deadline})
	case errors.As(res.Err, &sleep):
		m.apply(attempt, history.TimerStartedData{Position: sleep.Position, FireAt: sleep.FireAt})
	case errors.As(res.Err, &child):
		m.apply(attempt, history.ChildWaitStartedData{Positions: child.Positions, Count: child.Count})
	case res.Err == nil:
		m.apply(attempt, history.TaskCompletedData{Output: res.Output})
	}
	return res
}

// step is a step that counts its runs.
func (m *patchTask) step(ctx interpreter.Context, name string) error {
	_, err := interpreter.Step(ctx, name, func(context.Context) (string, error) {
		m.ran[name]++
		return name + " done", nil
	}, nil)
	return err
}

// markers are the patch_recorded events of the task's log, as id@position.
func (m *patchTask) markers() []string {
	var out []string
	for _, p := range m.state.Patches {
		out = append(out, fmt.Sprintf("%s@%d", p.ID, p.Position))
	}
	return out
}

func (m *patchTask) stepNames() []string {
	var out []string
	for _, s := range m.state.Steps {
		out = append(out, s.Name)
	}
	return out
}

// The workflows: v1 extracts, awaits an approval, stores; v2 adds
// "classify" behind a patch before the approval; v3 is v2 once the old
// branch is gone (DeprecatePatch).
func (m *patchTask) v1() interpreter.Func {
	return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		if _, _, err := interpreter.Receive[string](ctx, "approval", time.Hour); err != nil {
			return "", err
		}
		return "v1", m.step(ctx, "store")
	})
}

func (m *patchTask) v2() interpreter.Func {
	return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		path := "old"
		if interpreter.Patched(ctx, "add-classify") {
			path = "new"
			if err := m.step(ctx, "classify"); err != nil {
				return "", err
			}
		}
		if _, _, err := interpreter.Receive[string](ctx, "approval", time.Hour); err != nil {
			return "", err
		}
		return path, m.step(ctx, "store")
	})
}

func (m *patchTask) v3() interpreter.Func {
	return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		interpreter.DeprecatePatch(ctx, "add-classify")
		if err := m.step(ctx, "classify"); err != nil {
			return "", err
		}
		if _, _, err := interpreter.Receive[string](ctx, "approval", time.Hour); err != nil {
			return "", err
		}
		return "new", m.step(ctx, "store")
	})
}

func requireWaiting(t *testing.T, res interpreter.Result) {
	t.Helper()
	var wait *interpreter.WaitRequest
	require.ErrorAs(t, res.Err, &wait)
}

func requirePath(t *testing.T, res interpreter.Result, want string) {
	t.Helper()
	require.NoError(t, res.Err)
	require.JSONEq(t, fmt.Sprintf("%q", want), string(res.Output))
}

// A new task reaches the patch at the frontier: the marker is recorded,
// at the position of the step after it, and the new branch runs; the
// attempt after the approval replays it from the marker.
func TestPatchedAtTheFrontierRecordsTheMarker(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	requireWaiting(t, m.attempt(m.v2()))
	require.Equal(t, []string{"add-classify@1"}, m.markers())
	require.Equal(t, []string{"extract", "classify"}, m.stepNames())
	// The marker follows the step executed before it in the log, and
	// precedes the step after it.
	require.Equal(t, []history.Type{history.StepCompleted, history.PatchRecorded, history.StepCompleted, history.WaitStarted}, m.types[2:])

	m.signal("yes")
	requirePath(t, m.attempt(m.v2()), "new")
	require.Equal(t, []string{"add-classify@1"}, m.markers(), "no second marker")
	require.Equal(t, []string{"extract", "classify", "store"}, m.stepNames())
	require.Equal(t, map[string]int{"extract": 1, "classify": 1, "store": 1}, m.ran)
}

func (m *patchTask) signal(payload string) {
	m.t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(m.t, err)
	m.apply(0, history.SignalReceivedData{Name: "approval", Payload: raw})
}

// A task v1 left waiting for its approval (a receive recorded past the
// patch point) takes the old branch under v2, and records nothing.
func TestPatchedReplayingAWaitTakesTheOldBranch(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	requireWaiting(t, m.attempt(m.v1()))
	m.signal("yes")
	requirePath(t, m.attempt(m.v2()), "old")
	require.Empty(t, m.markers())
	require.Equal(t, []string{"extract", "store"}, m.stepNames())
	require.Zero(t, m.ran["classify"])
}

// A step recorded at the patch's position was written by code without the
// patch: the old branch, whatever comes after.
func TestPatchedReplayingAStepTakesTheOldBranch(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	// v1 ran extract and store, then a sleep ended its attempt.
	v1 := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		for _, name := range []string{"extract", "store"} {
			if err := m.step(ctx, name); err != nil {
				return "", err
			}
		}
		return "v1", interpreter.Sleep(ctx, time.Minute)
	})
	var sleep *interpreter.SleepRequest
	require.ErrorAs(t, m.attempt(v1).Err, &sleep)
	v2 := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		path := "old"
		if interpreter.Patched(ctx, "add-classify") {
			path = "new"
			if err := m.step(ctx, "classify"); err != nil {
				return "", err
			}
		}
		if err := m.step(ctx, "store"); err != nil {
			return "", err
		}
		return path, interpreter.Sleep(ctx, time.Minute)
	})
	m.now = m.now.Add(time.Hour)
	requirePath(t, m.attempt(v2), "old")
	require.Empty(t, m.markers())
	require.Equal(t, []string{"extract", "store", history.SleepStepName}, m.stepNames())
}

// A task asleep at the patch's position (its timer on record there) takes
// the old branch.
func TestPatchedReplayingATimerTakesTheOldBranch(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	body := func(patched bool) interpreter.Func {
		return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
			if err := m.step(ctx, "extract"); err != nil {
				return "", err
			}
			path := "old"
			if patched && interpreter.Patched(ctx, "add-classify") {
				path = "new"
				if err := m.step(ctx, "classify"); err != nil {
					return "", err
				}
			}
			if err := interpreter.Sleep(ctx, time.Minute); err != nil {
				return "", err
			}
			return path, m.step(ctx, "store")
		})
	}
	var sleep *interpreter.SleepRequest
	require.ErrorAs(t, m.attempt(body(false)).Err, &sleep)
	m.now = m.now.Add(time.Hour)
	requirePath(t, m.attempt(body(true)), "old")
	require.Empty(t, m.markers())
	require.Zero(t, m.ran["classify"])
}

// A task v1 left waiting on a child started past the patch point takes
// the old branch.
func TestPatchedReplayingAChildTakesTheOldBranch(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	body := func(patched bool) interpreter.Func {
		return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
			if err := m.step(ctx, "extract"); err != nil {
				return "", err
			}
			path := "old"
			if patched && interpreter.Patched(ctx, "add-classify") {
				path = "new"
				if err := m.step(ctx, "classify"); err != nil {
					return "", err
				}
			}
			h, err := interpreter.StartChild(ctx, interpreter.ChildRequest{TaskType: "ocr_page"})
			if err != nil {
				return "", err
			}
			if _, err := interpreter.ChildResult(ctx, h); err != nil {
				return "", err
			}
			return path, m.step(ctx, "store")
		})
	}
	var wait *interpreter.ChildWaitRequest
	require.ErrorAs(t, m.attempt(body(false)).Err, &wait)
	m.apply(0, history.ChildFinishedData{Position: 0, ChildID: "child-0", Status: history.StatusCompleted, Output: json.RawMessage(`"page"`)})
	requirePath(t, m.attempt(body(true)), "old")
	require.Empty(t, m.markers())
	require.Equal(t, []string{"extract", "store"}, m.stepNames())
	require.Zero(t, m.ran["classify"])
}

// DeprecatePatch records the marker at the frontier, and accepts on
// replay a history with it (v2's) and one without it (v1's, waiting past
// the point), recording nothing.
func TestDeprecatePatch(t *testing.T) {
	t.Parallel()
	t.Run("frontier", func(t *testing.T) {
		m := newPatchTask(t)
		requireWaiting(t, m.attempt(m.v3()))
		require.Equal(t, []string{"add-classify@1"}, m.markers())
		m.signal("yes")
		requirePath(t, m.attempt(m.v3()), "new")
		require.Equal(t, []string{"add-classify@1"}, m.markers())
	})
	t.Run("patched history", func(t *testing.T) {
		m := newPatchTask(t)
		requireWaiting(t, m.attempt(m.v2()))
		m.signal("yes")
		requirePath(t, m.attempt(m.v3()), "new")
		require.Equal(t, []string{"add-classify@1"}, m.markers())
		require.Equal(t, map[string]int{"extract": 1, "classify": 1, "store": 1}, m.ran)
	})
	t.Run("history without the marker", func(t *testing.T) {
		m := newPatchTask(t)
		// A workflow whose patch guarded nothing that ran yet: the marker
		// is missing, DeprecatePatch does not mind.
		body := func(deprecated bool) interpreter.Func {
			return interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
				if err := m.step(ctx, "extract"); err != nil {
					return "", err
				}
				if deprecated {
					interpreter.DeprecatePatch(ctx, "add-classify")
				}
				if _, _, err := interpreter.Receive[string](ctx, "approval", time.Hour); err != nil {
					return "", err
				}
				return "done", m.step(ctx, "store")
			})
		}
		requireWaiting(t, m.attempt(body(false)))
		m.signal("yes")
		requirePath(t, m.attempt(body(true)), "done")
		require.Empty(t, m.markers())
	})
}

// Patched asked twice for one id in a run answers alike, with one marker;
// two ids make two markers at their positions.
func TestPatchedTwiceInARun(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	var answers []bool
	fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		answers = append(answers, interpreter.Patched(ctx, "a"))
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		answers = append(answers, interpreter.Patched(ctx, "a"), interpreter.Patched(ctx, "b"))
		return "ok", nil
	})
	requirePath(t, m.attempt(fn), "ok")
	require.Equal(t, []bool{true, true, true}, answers)
	require.Equal(t, []string{"a@0", "b@1"}, m.markers())
}

// An invalid patch id ends the run as bad step options, recording
// nothing.
func TestPatchedRefusesBadIDs(t *testing.T) {
	t.Parallel()
	for name, id := range map[string]string{
		"empty": "", "too long": strings.Repeat("p", history.MaxPatchIDBytes+1),
		"control character": "add\x00classify", "newline": "add\nclassify", "not UTF-8": "add\xffclassify",
	} {
		for _, deprecated := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s deprecated=%v", name, deprecated), func(t *testing.T) {
				t.Parallel()
				m := newPatchTask(t)
				fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
					if deprecated {
						interpreter.DeprecatePatch(ctx, id)
					} else if interpreter.Patched(ctx, id) {
						return "", errors.New("an invalid patch took the new branch")
					}
					return "ran on", m.step(ctx, "extract")
				})
				res := m.attempt(fn)
				require.ErrorIs(t, res.Err, interpreter.ErrBadStepOpts)
				require.Empty(t, m.markers())
				require.Zero(t, m.ran["extract"])
			})
		}
	}
	m := newPatchTask(t)
	fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		return fmt.Sprint(interpreter.Patched(ctx, strings.Repeat("é", history.MaxPatchIDBytes/2))), nil
	})
	requirePath(t, m.attempt(fn), "true")
}

// A collect-only run (compensation's) records no marker: at the frontier
// Patched answers true, on a history without the marker false.
func TestPatchedInACollectOnlyRun(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	requireWaiting(t, m.attempt(m.v1()))
	p := m.params(m.state.Attempt)
	p.CollectOnly = true
	p.Record = func(history.Payload) error { return errors.New("a collect-only run records nothing") }
	var answers []bool
	fn := interpreter.Typed(func(ctx interpreter.Context, _ struct{}) (string, error) {
		if err := m.step(ctx, "extract"); err != nil {
			return "", err
		}
		answers = append(answers, interpreter.Patched(ctx, "add-classify"))
		if _, _, err := interpreter.Receive[string](ctx, "approval", time.Hour); err != nil {
			return "", err
		}
		answers = append(answers, interpreter.Patched(ctx, "later"))
		return "", m.step(ctx, "store")
	})
	m.signal("yes")
	res := interpreter.Run(p, fn, nil)
	require.ErrorIs(t, res.Err, interpreter.ErrCollected)
	require.Equal(t, []bool{false, true}, answers)
}

// A marker that cannot be recorded ends the run before anything after the
// patch runs: the next attempt decides again.
func TestPatchedMarkerNotRecordedEndsTheRun(t *testing.T) {
	t.Parallel()
	m := newPatchTask(t)
	m.apply(1, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: 1, LeaseExpiresAt: m.now.Add(time.Minute)})
	p := m.params(1)
	p.Record = func(rec history.Payload) error {
		if _, ok := rec.(history.PatchRecordedData); ok {
			return errors.New("database unreachable")
		}
		m.apply(1, rec)
		return nil
	}
	res := interpreter.Run(p, m.v2(), nil)
	require.ErrorIs(t, res.Err, interpreter.ErrRecordFailed)
	require.Equal(t, []string{"extract"}, m.stepNames(), "the step before the patch is on record")
	require.Zero(t, m.ran["classify"])
	require.Empty(t, m.markers())
}
