package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// boundTests: the history limits of a store ([store.HistoryLimits]), each
// run on a store made with the limits it names.
var boundTests = []struct {
	name   string
	limits store.HistoryLimits
	run    func(t *testing.T, s store.Store)
}{
	{"SignalAtTheEventBoundIsRefused", store.HistoryLimits{MaxEvents: 4, MaxBytes: -1}, testSignalEventBound},
	{"SignalPastTheByteBoundIsRefused", store.HistoryLimits{MaxEvents: -1, MaxBytes: 8000}, testSignalByteBound},
	{"RunsAndRequestsAreNotBounded", store.HistoryLimits{MaxEvents: 2, MaxBytes: 10}, testBoundLeavesRunsAlone},
}

// RunHistoryBounds runs the tests of history limits against stores made
// by newStore with the limits given; each call must return a fresh, empty,
// migrated store.
func RunHistoryBounds(t *testing.T, newStore func(t *testing.T, limits store.HistoryLimits) store.Store) {
	t.Helper()
	for _, tc := range boundTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.limits)
			tc.run(t, s)
			if !t.Failed() {
				requireReplayMatches(t, s)
			}
		})
	}
}

// requireHistoryFull checks that err is the refusal of a full history and
// returns it.
func requireHistoryFull(t *testing.T, err error) *store.HistoryFullError {
	t.Helper()
	requireIs(t, err, store.ErrHistoryFull)
	var full *store.HistoryFullError
	require.True(t, errors.As(err, &full), "a *store.HistoryFullError: %v", err)
	return full
}

func testSignalEventBound(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	for i := range 3 {
		_, err := signal(t, s, id, "note", "", "d-"+string(rune('a'+i)))
		require.NoError(t, err, "signal %d", i)
	}
	_, err := signal(t, s, id, "note", "", "d-z")
	full := requireHistoryFull(t, err)
	require.Equal(t, int64(4), full.Events)
	require.Equal(t, int64(4), full.MaxEvents)
	require.Contains(t, err.Error(), "4 events, at the limit of 4")
	require.Len(t, events(t, s, id), 4, "nothing written")

	// A signal already received is still answered as a duplicate.
	res, err := signal(t, s, id, "note", "", "d-a")
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	// An operator's request is not bounded: it is how the task ends.
	st := stateOf(t, s, id)
	_, err = s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: id, State: st, Payloads: []history.Payload{history.CancelRequestedData{By: "ops", Reason: "too long"}},
	})
	require.NoError(t, err)
	require.Len(t, events(t, s, id), 5)
}

func testSignalByteBound(t *testing.T, s store.Store) {
	id := start(t, s, spec{Input: []byte(`"` + strings.Repeat("i", 9000) + `"`)})
	big := `"` + strings.Repeat("x", 3000) + `"`
	for i := range 2 {
		_, err := signal(t, s, id, "note", big, "")
		require.NoError(t, err, "signal %d: the input is not counted", i)
	}
	_, err := signal(t, s, id, "note", big, "")
	full := requireHistoryFull(t, err)
	require.Greater(t, full.Bytes, int64(6000))
	require.Greater(t, full.AddingBytes, int64(3000))
	require.Equal(t, int64(8000), full.MaxBytes)
	require.Greater(t, full.Bytes+full.AddingBytes, full.MaxBytes)
	require.Contains(t, err.Error(), "limit of 8000")
	require.Len(t, events(t, s, id), 3, "nothing written")

	// The refusal added nothing to the count: a small signal still fits.
	_, err = signal(t, s, id, "note", `"small"`, "")
	require.NoError(t, err)
	// One larger than the whole bound never fits.
	other := start(t, s, spec{})
	_, err = signal(t, s, other, "note", `"`+strings.Repeat("y", 9000)+`"`, "")
	requireHistoryFull(t, err)
	require.Len(t, events(t, s, other), 1, "nothing written")
}

func testBoundLeavesRunsAlone(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	// Past both bounds, the run goes on and ends.
	_, err := appendFenced(t, s, ct, history.StepCompletedData{Position: 0, Name: "a", Output: []byte(`"` + strings.Repeat("o", 100) + `"`)},
		history.TaskCompletedData{Output: completedOutput})
	require.NoError(t, err)
	require.Len(t, events(t, s, id), 4)
	_, err = signal(t, s, id, "note", "", "")
	requireIs(t, err, store.ErrTaskState, "a finished task is refused for its status first")
}
