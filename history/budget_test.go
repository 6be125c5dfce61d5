package history_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

// An attempt that ends with a reservation open (its step's settle
// failed) settles it itself, charged whole: attempt_ended is a reason
// replay accepts, and removes the reservation like any other; an
// unknown reason is refused.
func TestBudgetSettledAttemptEndedReplays(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/budgeted.json")
	require.NoError(t, err)
	var events []history.Event
	require.NoError(t, json.Unmarshal(raw, &events))
	events = events[:5] // scheduled, started, reserved, completed, settled
	settled := events[4].Data.(history.BudgetSettledData)
	require.Equal(t, history.SettleStepCompleted, settled.Reason)

	settled.Reason, settled.Tokens, settled.CostUSD = history.SettleAttemptEnded, settled.ReservedTokens, settled.ReservedUSD
	events[4].Data = settled
	state, err := history.Replay(events)
	require.NoError(t, err)
	require.Empty(t, state.Reservations)

	settled.Reason = "forgotten"
	events[4].Data = settled
	_, err = history.Replay(events)
	require.ErrorContains(t, err, "forgotten")
}

// A wait over budget ends no later than the task's own deadline, and a
// task whose cancel came first is due at once (to compensate), not at
// the wait's deadline.
func TestBudgetRefusedWaitHonoursDeadlineAndCancel(t *testing.T) {
	t.Parallel()
	load := func() []history.Event {
		raw, err := os.ReadFile("testdata/budgeted.json")
		require.NoError(t, err)
		var events []history.Event
		require.NoError(t, json.Unmarshal(raw, &events))
		return events[:6] // ... the first step settled, the second refused (wait)
	}
	events := load()
	refused := events[5]
	require.Equal(t, history.BudgetRefused, refused.Type())
	wait := *refused.Data.(history.BudgetRefusedData).Deadline

	sc := events[0].Data.(history.TaskScheduledData)
	early := wait.Add(-30 * time.Minute)
	sc.Deadline = &early
	events[0].Data = sc
	state, err := history.Replay(events)
	require.NoError(t, err)
	require.True(t, early.Equal(state.RunAt), "due at the task's deadline %s, got %s", early, state.RunAt)

	events = load()
	cancel := history.Event{Seq: 6, At: refused.At, Attempt: refused.Attempt, Data: history.CancelRequestedData{By: "bob"}}
	refused.Seq = 7
	events = append(events[:5], cancel, refused)
	state, err = history.Replay(events)
	require.NoError(t, err)
	require.True(t, refused.At.Equal(state.RunAt), "due at once, got %s", state.RunAt)
}
