package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// remoteBase is a task whose attempt 1 dispatched remote steps 0 and 1
// and awaits both.
func remoteBase() []history.Event {
	return historytest.Build(
		historytest.Scheduled(), historytest.Started(1, 1),
		historytest.E{Attempt: 1, Data: history.RemoteStepDispatchedData{Position: 0, Name: "ocr", Queue: "q", Attempt: 1, HeartbeatTimeoutMillis: 30_000, Compensable: true}},
		historytest.E{Attempt: 1, Data: history.RemoteStepDispatchedData{Position: 1, Name: "ocr", Queue: "q", Attempt: 1, HeartbeatTimeoutMillis: 30_000}},
		historytest.E{Attempt: 1, Data: history.RemoteWaitStartedData{Positions: []int{0, 1}, Count: 2}},
	)
}

func applyAll(t *testing.T, events []history.Event, more ...history.Payload) (history.State, error) {
	t.Helper()
	s, err := history.Replay(events)
	require.NoError(t, err)
	at := events[len(events)-1].At
	for _, p := range more {
		at = at.Add(time.Second)
		s, err = history.Apply(s, history.Event{Seq: s.LastSeq + 1, At: at, Data: p})
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

func TestRemoteStepsFold(t *testing.T) {
	t.Parallel()
	s, err := history.Replay(remoteBase())
	require.NoError(t, err)
	require.Equal(t, history.StatusPending, s.Status)
	require.Equal(t, history.Never, s.RunAt, "a waiting task is due when its steps answer")
	require.Len(t, s.Remote, 2)

	// One completes: it joins the steps; the task still waits for the other.
	done := history.RemoteStepCompletedData{Position: 0, Name: "ocr", Attempt: 1, Worker: "py", Claim: "n1", Output: json.RawMessage(`"a"`)}
	s1, err := applyAll(t, remoteBase(), done)
	require.NoError(t, err)
	require.Equal(t, []history.Step{{Position: 0, Name: "ocr", Output: json.RawMessage(`"a"`), Compensable: true}}, s1.Steps)
	require.Equal(t, history.Never, s1.RunAt)
	// The other fails: due at once, its failure for the workflow to classify.
	failed := history.RemoteStepFailedData{Position: 1, Name: "ocr", Attempt: 1, Worker: "py", Error: history.ErrorInfo{Message: "boom", Kind: "X"}}
	s2, err := applyAll(t, remoteBase(), done, failed)
	require.NoError(t, err)
	require.True(t, s2.RunAt.Before(history.Never))
	r, ok := s2.RemoteAt(1)
	require.True(t, ok)
	require.False(t, r.InFlight())
	require.False(t, r.Retry, "not classified yet")

	// Its streams are recorded as the outcome closed them, once each, at
	// its position.
	streams := func(ss ...history.StreamClosedData) history.RemoteStepCompletedData {
		d := done
		d.Streams = ss
		return d
	}
	ok1 := history.StreamClosedData{Name: "tokens", Position: 0, Chunks: 2, Bytes: 9, Outcome: history.StreamCompleted}
	_, err = applyAll(t, remoteBase(), streams(ok1))
	require.NoError(t, err)
	rewound, elsewhere, badName := ok1, ok1, ok1
	rewound.Outcome, elsewhere.Position, badName.Name = history.StreamRewound, 1, "two words"
	for _, bad := range [][]history.StreamClosedData{{rewound}, {elsewhere}, {badName}, {ok1, ok1}} {
		_, err = applyAll(t, remoteBase(), streams(bad...))
		require.ErrorIs(t, err, history.ErrInvalidHistory)
	}
	failedStreams := failed
	failedStreams.Streams = []history.StreamClosedData{{Name: "tokens", Position: 1, Outcome: history.StreamRewound}}
	_, err = applyAll(t, remoteBase(), failedStreams)
	require.NoError(t, err)
	failedStreams.Streams[0].Outcome = history.StreamCompleted
	_, err = applyAll(t, remoteBase(), failedStreams)
	require.ErrorIs(t, err, history.ErrInvalidHistory, "a failure rewinds its streams")

	// A second answer for the same attempt is not a history.
	_, err = applyAll(t, remoteBase(), done, done)
	require.ErrorIs(t, err, history.ErrInvalidHistory)
	// Nor is a redispatch of a step not classified for a retry.
	_, err = applyAll(t, remoteBase(), failed, history.RemoteStepDispatchedData{Position: 1, Name: "ocr", Queue: "q", Attempt: 2, HeartbeatTimeoutMillis: 1000})
	require.ErrorIs(t, err, history.ErrInvalidHistory)
}

// A remote step's answer during compensation is refused, as a
// step_completed is: compensation undoes what was on record.
func TestRemoteOutcomeDuringCompensationIsRefused(t *testing.T) {
	t.Parallel()
	events := remoteBase()
	s, err := history.Replay(events)
	require.NoError(t, err)
	at := events[len(events)-1].At.Add(time.Second)
	next := func(attempt int, p history.Payload) {
		t.Helper()
		at = at.Add(time.Second)
		s, err = history.Apply(s, history.Event{Seq: s.LastSeq + 1, At: at, Attempt: attempt, Data: p})
		require.NoError(t, err)
	}
	next(0, history.CancelRequestedData{By: "ops"})
	next(2, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: 2, LeaseExpiresAt: at.Add(time.Minute)})
	next(2, history.CompensationStartedData{Reason: history.CompensateCancelled})
	_, err = history.Apply(s, history.Event{Seq: s.LastSeq + 1, At: at, Data: history.RemoteStepCompletedData{
		Position: 0, Name: "ocr", Attempt: 1, Worker: "py", Claim: "n1"}})
	require.ErrorIs(t, err, history.ErrInvalidHistory)
}
