package history_test

import (
	"encoding/json"
	"os"
	"testing"

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
