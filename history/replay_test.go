package history_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// Short names for the builder, which the tables below use a lot.
var (
	build        = historytest.Build
	scheduled    = historytest.Scheduled
	started      = historytest.Started
	step         = historytest.Step
	retry        = historytest.Retry
	failAttempt  = historytest.FailAttempt
	expired      = historytest.Expired
	released     = historytest.Released
	completed    = historytest.Completed
	failed       = historytest.Failed
	deadLettered = historytest.DeadLettered
	requeued     = historytest.Requeued
	signal       = historytest.Signal
)

// at returns the time Build gives the event with seq.
func at(seq int64) time.Time { return historytest.Base.Add(time.Duration(seq-1) * time.Second) }

// requireInvalid checks that err is marked ErrInvalidHistory and names the
// offending event.
func requireInvalid(t *testing.T, err error, contains string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, errors.Is(err, history.ErrInvalidHistory), "error not marked ErrInvalidHistory: %+v", err)
	require.Contains(t, err.Error(), contains)
}

func mustReplay(t *testing.T, events []history.Event) history.State {
	t.Helper()
	s, err := history.Replay(events)
	if err != nil {
		require.NoError(t, err, "history:\n%s", historytest.Dump(events))
	}
	return s
}

// Each valid transition: the state a history leads to, checked field by
// field where the transition changes it.
func TestApplyTransitions(t *testing.T) {
	t.Parallel()

	// Prefixes the cases extend.
	pending := []historytest.E{scheduled()}
	running := append(pending[:1:1], started(1, 1))
	withStep := append(running[:2:2], step(1, 0, "reserve"))
	retrying := append(withStep[:3:3], retry(1, "connection reset"))
	finalFailure := append(withStep[:3:3], failAttempt(1, history.Permanent, "card declined"))

	tests := []struct {
		name   string
		events []historytest.E
		check  func(t *testing.T, s history.State)
	}{
		{
			name:   "scheduled is pending",
			events: pending,
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusPending, s.Status)
				require.Equal(t, scheduled().Data, s.Scheduled)
				require.Equal(t, historytest.Base, s.RunAt)
				require.Equal(t, at(1), s.CreatedAt)
				require.Equal(t, at(1), s.UpdatedAt)
				require.Zero(t, s.Attempt)
				require.Zero(t, s.Lease)
				require.True(t, s.StartedAt.IsZero())
				require.True(t, s.FinishedAt.IsZero())
				require.Equal(t, int64(1), s.LastSeq)
			},
		},
		{
			name:   "attempt_started runs under a lease",
			events: running,
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRunning, s.Status)
				require.Equal(t, 1, s.Attempt)
				require.Equal(t, history.Lease{Owner: historytest.Worker, Epoch: 1, ExpiresAt: at(2).Add(historytest.LeaseTTL)}, s.Lease)
				require.Equal(t, at(2), s.StartedAt)
				require.Equal(t, at(2), s.UpdatedAt)
				require.Equal(t, int64(2), s.LastSeq)
			},
		},
		{
			name:   "step_completed records the step",
			events: withStep,
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRunning, s.Status)
				require.Equal(t, []history.Step{{Position: 0, Name: "reserve", Output: json.RawMessage(`{"position":0,"step":"reserve"}`)}}, s.Steps)
				require.Equal(t, historytest.Worker, s.Lease.Owner)
			},
		},
		{
			name:   "attempt_failed with next_run_at retries",
			events: retrying,
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRetrying, s.Status)
				require.Equal(t, at(4).Add(historytest.Backoff), s.RunAt)
				require.Equal(t, &history.ErrorInfo{Class: history.Transient, Message: "connection reset"}, s.LastError)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease, "the lease ends, its epoch stays")
				require.Len(t, s.Steps, 1, "completed steps survive the attempt")
			},
		},
		{
			name:   "attempt_failed without next_run_at awaits the terminal event",
			events: finalFailure,
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRunning, s.Status)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease)
				require.Equal(t, history.Permanent, s.LastError.Class)
				require.Equal(t, historytest.Base, s.RunAt)
			},
		},
		{
			name:   "task_failed after a final attempt_failed",
			events: append(finalFailure[:4:4], failed(1, "card declined")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusFailed, s.Status)
				require.Equal(t, at(5), s.FinishedAt)
				require.Equal(t, &history.ErrorInfo{Class: history.Permanent, Message: "card declined"}, s.LastError)
			},
		},
		{
			name:   "task_dead_lettered after a final attempt_failed",
			events: append(finalFailure[:4:4], deadLettered(1, "attempts exhausted")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusDeadLettered, s.Status)
				require.Equal(t, at(5), s.FinishedAt)
				require.Equal(t, "attempts exhausted", s.LastError.Message)
			},
		},
		{
			name:   "lease_expired retries at next_run_at",
			events: append(withStep[:3:3], expired(1, 1)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRetrying, s.Status)
				require.Equal(t, at(4).Add(historytest.Backoff), s.RunAt)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease)
				require.Nil(t, s.LastError)
			},
		},
		{
			name:   "task_released is pending again at once",
			events: append(withStep[:3:3], released(1, 1)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusPending, s.Status)
				require.Equal(t, at(4), s.RunAt)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease)
			},
		},
		{
			name:   "task_completed",
			events: append(withStep[:3:3], completed(1)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusCompleted, s.Status)
				require.Equal(t, json.RawMessage(`{"ok":true}`), s.Output)
				require.Equal(t, at(4), s.FinishedAt)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease)
			},
		},
		{
			name:   "retry starts the next attempt, steps continue",
			events: append(retrying[:4:4], started(2, 2), step(2, 1, "charge")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRunning, s.Status)
				require.Equal(t, 2, s.Attempt)
				require.Equal(t, int64(2), s.Lease.Epoch)
				require.Equal(t, at(2), s.StartedAt, "started_at is the first attempt's")
				require.Len(t, s.Steps, 2)
				require.Equal(t, "charge", s.Steps[1].Name)
				require.NotNil(t, s.LastError, "the last error stays until replaced")
			},
		},
		{
			name:   "lease epoch may jump",
			events: append(retrying[:4:4], started(2, 7)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, int64(7), s.Lease.Epoch)
			},
		},
		{
			name:   "released task restarts under a new epoch",
			events: append(running[:2:2], released(1, 1), started(2, 2)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRunning, s.Status)
				require.Equal(t, 2, s.Attempt)
			},
		},
		{
			name:   "task_failed from pending",
			events: append(pending[:1:1], failed(0, "input refused")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusFailed, s.Status)
				require.Zero(t, s.Attempt)
				require.True(t, s.StartedAt.IsZero())
				require.Equal(t, at(2), s.FinishedAt)
			},
		},
		{
			name:   "task_dead_lettered from retrying",
			events: append(retrying[:4:4], deadLettered(1, "needs an operator")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusDeadLettered, s.Status)
			},
		},
		{
			name:   "task_requeued from dead_lettered restarts the budget, not the attempt count",
			events: append(retrying[:4:4], started(2, 2), deadLettered(2, "exhausted"), requeued("provider back")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusPending, s.Status)
				require.Equal(t, at(7), s.RunAt, "due at once")
				require.Equal(t, 2, s.Attempt)
				require.Equal(t, history.Budget{}, s.Budget)
				require.True(t, s.FinishedAt.IsZero())
				require.NotNil(t, s.LastError, "the last error stays as evidence")
			},
		},
		{
			name:   "an attempt after a requeue starts a new budget",
			events: append(retrying[:4:4], started(2, 2), deadLettered(2, "exhausted"), requeued(""), started(3, 3)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, 3, s.Attempt)
				require.Equal(t, history.Budget{Attempts: 1, Since: at(8)}, s.Budget)
			},
		},
		{
			name:   "a completed step starts the next step's budget",
			events: append(retrying[:4:4], started(2, 2), step(2, 1, "charge")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.Budget{Attempts: 1, Since: at(6)}, s.Budget)
			},
		},
		{
			name:   "a released attempt does not count against the budget",
			events: append(running[:2:2], released(1, 1), started(2, 2)),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.Budget{Attempts: 1, Since: at(2)}, s.Budget)
			},
		},
		{
			name: "a retry scheduled after a cancel request is due at once",
			events: append(running[:2:2], historytest.E{Data: history.CancelRequestedData{By: "api"}},
				retry(1, "flaky")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusRetrying, s.Status)
				require.True(t, s.CancelRequested)
				require.Equal(t, at(4), s.RunAt, "not after the backoff: the next attempt compensates")
			},
		},
		{
			name:   "task_dead_lettered by the rescuer while running",
			events: append(withStep[:3:3], deadLettered(1, "lease expired on the last attempt")),
			check: func(t *testing.T, s history.State) {
				t.Helper()
				require.Equal(t, history.StatusDeadLettered, s.Status)
				require.Equal(t, history.Lease{Epoch: 1}, s.Lease, "a terminal event ends the lease")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events := build(tt.events...)
			s := mustReplay(t, events)
			require.Equal(t, events[len(events)-1].Seq, s.LastSeq)
			require.Equal(t, events[len(events)-1].At, s.UpdatedAt)
			tt.check(t, s)
		})
	}
}

// notAPayload is a Payload this package does not know.
type notAPayload struct{}

func (notAPayload) EventType() history.Type { return history.TaskScheduled }

// Each invalid transition: the history is valid up to its last event, and
// Apply refuses that one with an error marked ErrInvalidHistory, leaving the
// state as it was.
func TestApplyInvalid(t *testing.T) {
	t.Parallel()

	pending := []historytest.E{scheduled()}
	running := []historytest.E{scheduled(), started(1, 1), step(1, 0, "reserve")}
	retrying := []historytest.E{scheduled(), started(1, 1), retry(1, "reset")}
	ended := []historytest.E{scheduled(), started(1, 1), failAttempt(1, history.Permanent, "declined")}
	with := func(prefix []historytest.E, next ...historytest.E) []historytest.E {
		return append(prefix[:len(prefix):len(prefix)], next...)
	}

	tests := []struct {
		name     string
		events   []historytest.E
		mutate   func(events []history.Event) // applied after Build
		contains string
	}{
		// Sequence numbers.
		{name: "first seq 0", events: pending, mutate: func(ev []history.Event) { ev[0].Seq = 0 }, contains: "expected seq 1"},
		{name: "first seq 2", events: pending, mutate: func(ev []history.Event) { ev[0].Seq = 2 }, contains: "expected seq 1"},
		{name: "seq gap", events: with(pending, started(1, 1)), mutate: func(ev []history.Event) { ev[1].Seq = 3 }, contains: "event 3 (attempt_started): expected seq 2"},
		{name: "seq repeated", events: with(pending, started(1, 1)), mutate: func(ev []history.Event) { ev[1].Seq = 1 }, contains: "expected seq 2"},
		{name: "seq negative", events: with(pending, started(1, 1)), mutate: func(ev []history.Event) { ev[1].Seq = -1 }, contains: "expected seq 2"},

		// The start of a history.
		{name: "starts with attempt_started", events: []historytest.E{started(1, 1)}, contains: "a history starts with task_scheduled"},
		{name: "starts with task_completed", events: []historytest.E{completed(1)}, contains: "a history starts with task_scheduled"},
		{name: "scheduled twice", events: with(pending, scheduled()), contains: "task already scheduled"},
		{name: "scheduled again while running", events: with(running, scheduled()), contains: "task already scheduled"},
		{
			name:     "scheduled without task type",
			events:   []historytest.E{{Data: history.TaskScheduledData{Namespace: "default", Queue: "default", MaxAttempts: 1}}},
			contains: "no task type",
		},

		// Requeues.
		{name: "requeue pending", events: with(pending, requeued("")), contains: "task is pending, only a dead-lettered task is requeued"},
		{name: "requeue retrying", events: with(retrying, requeued("")), contains: "task is retrying"},
		{name: "requeue failed", events: with(ended, failed(1, "declined"), requeued("")), contains: "task is already failed"},
		{name: "requeue completed", events: with(running, completed(1), requeued("")), contains: "task is already completed"},
		{
			name:     "requeue without requester",
			events:   with(retrying, deadLettered(1, "x"), historytest.E{Data: history.TaskRequeuedData{}}),
			contains: "no requester",
		},
		{name: "requeued twice", events: with(retrying, deadLettered(1, "x"), requeued(""), requeued("")), contains: "task is pending"},

		// Payloads.
		{name: "nil payload", events: with(pending, historytest.E{Attempt: 1}), contains: "event 2: no payload"},
		{name: "unknown payload", events: with(pending, historytest.E{Data: notAPayload{}}), contains: "unknown payload"},
		{name: "unknown first payload", events: []historytest.E{{Data: notAPayload{}}}, contains: "unknown payload"},
		{name: "pointer payload", events: []historytest.E{{Data: &history.TaskScheduledData{TaskType: "x"}}}, contains: "unknown payload"},
		{name: "nil pointer payload", events: with(pending, historytest.E{Attempt: 1, Data: (*history.AttemptStartedData)(nil)}), contains: "unknown payload"},

		// After a terminal event.
		{name: "attempt after completed", events: with(running, completed(1), started(2, 2)), contains: "task is already completed"},
		{name: "step after completed", events: with(running, completed(1), step(1, 1, "late")), contains: "task is already completed"},
		{name: "completed twice", events: with(running, completed(1), completed(1)), contains: "task is already completed"},
		{name: "failed after completed", events: with(running, completed(1), failed(1, "late")), contains: "task is already completed"},
		{name: "attempt after failed", events: with(ended, failed(1, "declined"), started(2, 2)), contains: "task is already failed"},
		{name: "dead-lettered after failed", events: with(pending, failed(0, "refused"), deadLettered(0, "x")), contains: "task is already failed"},
		{name: "attempt after dead-lettered", events: with(retrying, deadLettered(1, "review"), started(2, 2)), contains: "task is already dead_lettered"},
		{name: "released after dead-lettered", events: with(running, deadLettered(1, "review"), released(1, 1)), contains: "task is already dead_lettered"},
		{name: "scheduled after completed", events: with(running, completed(1), scheduled()), contains: "task is already completed"},

		// attempt_started.
		{name: "attempt_started while running", events: with(running, started(2, 2)), contains: "task is running"},
		{name: "attempt_started after a final attempt_failed", events: with(ended, started(2, 2)), contains: "task is running"},
		{name: "attempt not incremented", events: with(retrying, started(1, 2)), contains: "attempt 1 follows attempt 1"},
		{name: "attempt skipped", events: with(retrying, started(3, 2)), contains: "attempt 3 follows attempt 1"},
		{name: "first attempt 0", events: with(pending, started(0, 1)), contains: "attempt 0 follows attempt 0"},
		{name: "first attempt 2", events: with(pending, started(2, 1)), contains: "attempt 2 follows attempt 0"},
		{name: "epoch not raised", events: with(retrying, started(2, 1)), contains: "lease epoch 1 does not exceed 1"},
		{name: "epoch lowered", events: with(pending, started(1, 5), retry(1, "x"), started(2, 4)), contains: "lease epoch 4 does not exceed 5"},
		{name: "first epoch 0", events: with(pending, started(1, 0)), contains: "lease epoch 0 does not exceed 0"},
		{name: "epoch not raised after release", events: with(running, released(1, 1), started(2, 1)), contains: "lease epoch 1 does not exceed 1"},
		{
			name:     "attempt_started without worker",
			events:   with(pending, historytest.E{Attempt: 1, Data: history.AttemptStartedData{LeaseEpoch: 1}}),
			contains: "no worker id",
		},

		// step_completed.
		{name: "step when pending", events: with(pending, step(0, 0, "reserve")), contains: "task is pending, not running"},
		{name: "step when retrying", events: with(retrying, step(1, 0, "reserve")), contains: "task is retrying, not running"},
		{name: "step after a final attempt_failed", events: with(ended, step(1, 0, "reserve")), contains: "attempt 1 already ended"},
		{name: "step repeats a position ahead", events: with(running, step(1, 3, "ship"), step(1, 3, "ship")), contains: "position 3, expected 1"},
		{name: "step repeats a position", events: with(running, step(1, 0, "reserve")), contains: "position 0, expected 1"},
		{name: "step negative position", events: with(running, step(1, -1, "x")), contains: "position -1, expected 1"},
		{name: "step restarts after retry", events: with(running, retry(1, "x"), started(2, 2), step(2, 0, "reserve")), contains: "position 0, expected 1"},
		{name: "step in an old attempt", events: with(retrying, started(2, 2), step(1, 0, "reserve")), contains: "belongs to attempt 1, current is 2"},
		{name: "step in a future attempt", events: with(running, step(2, 1, "charge")), contains: "belongs to attempt 2, current is 1"},
		{
			name:     "step without name",
			events:   with(running, historytest.E{Attempt: 1, Data: history.StepCompletedData{Position: 1}}),
			contains: "no step name",
		},

		// attempt_failed.
		{name: "attempt_failed when pending", events: with(pending, retry(0, "x")), contains: "task is pending, not running"},
		{name: "attempt_failed when retrying", events: with(retrying, retry(1, "x")), contains: "task is retrying, not running"},
		{name: "attempt_failed twice", events: with(ended, failAttempt(1, history.Permanent, "again")), contains: "attempt 1 already ended"},
		{name: "attempt_failed wrong attempt", events: with(running, retry(2, "x")), contains: "belongs to attempt 2, current is 1"},

		// lease_expired.
		{name: "lease_expired wrong epoch", events: with(pending, started(1, 2), expired(1, 1)), contains: "lease epoch 1, current is 2"},
		{name: "lease_expired future epoch", events: with(running, expired(1, 2)), contains: "lease epoch 2, current is 1"},
		{name: "lease_expired stale after retry", events: with(retrying, started(2, 2), expired(2, 1)), contains: "lease epoch 1, current is 2"},
		{name: "lease_expired when pending", events: with(pending, expired(0, 0)), contains: "task is pending, not running"},
		{name: "lease_expired when retrying", events: with(retrying, expired(1, 1)), contains: "task is retrying, not running"},
		{name: "lease_expired twice", events: with(running, expired(1, 1), expired(1, 1)), contains: "task is retrying, not running"},
		{name: "lease_expired after a final attempt_failed", events: with(ended, expired(1, 1)), contains: "attempt 1 already ended"},
		{name: "lease_expired wrong attempt", events: with(running, expired(2, 1)), contains: "belongs to attempt 2, current is 1"},

		// task_released.
		{name: "task_released wrong epoch", events: with(pending, started(1, 3), released(1, 2)), contains: "lease epoch 2, current is 3"},
		{name: "task_released when pending", events: with(pending, released(0, 0)), contains: "task is pending, not running"},
		{name: "task_released when retrying", events: with(retrying, released(1, 1)), contains: "task is retrying, not running"},
		{name: "task_released twice", events: with(running, released(1, 1), released(1, 1)), contains: "task is pending, not running"},
		{name: "task_released after a final attempt_failed", events: with(ended, released(1, 1)), contains: "attempt 1 already ended"},

		// task_completed.
		{name: "task_completed when pending", events: with(pending, completed(0)), contains: "task is pending, not running"},
		{name: "task_completed when retrying", events: with(retrying, completed(1)), contains: "task is retrying, not running"},
		{name: "task_completed after a final attempt_failed", events: with(ended, completed(1)), contains: "attempt 1 already ended"},
		{name: "task_completed after release", events: with(running, released(1, 1), completed(1)), contains: "task is pending, not running"},
		{name: "task_completed wrong attempt", events: with(running, completed(2)), contains: "belongs to attempt 2, current is 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events := build(tt.events...)
			if tt.mutate != nil {
				tt.mutate(events)
			}
			last := events[len(events)-1]
			before, err := history.Replay(events[:len(events)-1])
			if len(events) > 1 && err != nil {
				require.NoError(t, err, "the prefix must be valid:\n%s", historytest.Dump(events))
			}

			var after history.State
			require.NotPanics(t, func() { after, err = history.Apply(before, last) })
			requireInvalid(t, err, tt.contains)
			require.Contains(t, err.Error(), fmt.Sprintf("event %d", last.Seq), "the error names the event")
			require.Equal(t, before, after, "a refused event leaves the state as it was")

			// Replay reports the same error and the state before it.
			var replayed history.State
			require.NotPanics(t, func() { replayed, err = history.Replay(events) })
			requireInvalid(t, err, tt.contains)
			require.Equal(t, before, replayed)
		})
	}
}

func TestReplayEmpty(t *testing.T) {
	t.Parallel()

	for _, events := range [][]history.Event{nil, {}} {
		s, err := history.Replay(events)
		requireInvalid(t, err, "empty history")
		require.Zero(t, s)
	}
}

// Apply must not modify its input: a state is a value, and an earlier state
// never sees a later step, even when two different events are applied to it.
func TestApplyDoesNotAlias(t *testing.T) {
	t.Parallel()

	// Three steps: Replay's state then likely has spare capacity behind
	// them, which two continuations must not both write into.
	events := build(scheduled(), started(1, 1), step(1, 0, "a"), step(1, 1, "b"), step(1, 2, "c"))
	base := mustReplay(t, events)
	snapshot := mustReplay(t, events)

	next := func(name string) history.Event {
		return history.Event{Seq: 6, At: at(6), Attempt: 1, Data: history.StepCompletedData{Position: 3, Name: name}}
	}
	left, err := history.Apply(base, next("left"))
	require.NoError(t, err)
	right, err := history.Apply(base, next("right"))
	require.NoError(t, err)

	require.Equal(t, snapshot, base)
	require.Equal(t, []string{"a", "b", "c", "left"}, stepNames(left))
	require.Equal(t, []string{"a", "b", "c", "right"}, stepNames(right))
}

func stepNames(s history.State) []string {
	names := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		names[i] = st.Name
	}
	return names
}

func TestStatusTerminal(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status   history.Status
		terminal bool
	}{
		{history.StatusPending, false},
		{history.StatusRunning, false},
		{history.StatusRetrying, false},
		{history.StatusCompleted, true},
		{history.StatusFailed, true},
		{history.StatusCancelled, true},
		{history.StatusDeadLettered, true},
		{history.StatusContinued, true},
		{"", false},
		{"bogus", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.terminal, tt.status.Terminal(), "status %q", tt.status)
	}
}

func TestEventType(t *testing.T) {
	t.Parallel()

	require.Equal(t, history.Type(""), history.Event{}.Type())
	payloads := []history.Payload{
		history.TaskScheduledData{}, history.AttemptStartedData{}, history.StepCompletedData{},
		history.AttemptFailedData{}, history.LeaseExpiredData{}, history.TaskReleasedData{},
		history.TaskCompletedData{}, history.TaskFailedData{}, history.TaskDeadLetteredData{},
		history.TaskRequeuedData{}, history.CancelRequestedData{}, history.CompensationRequestedData{},
		history.CompensationStartedData{}, history.StepCompensatedData{}, history.CompensationFailedData{},
		history.TaskCancelledData{}, history.TaskExpiredData{}, history.TimerStartedData{}, history.TimerFiredData{},
		history.SignalReceivedData{}, history.WaitStartedData{}, history.WaitTimedOutData{},
		history.ChildStartedData{}, history.ChildWaitStartedData{}, history.ChildFinishedData{},
		history.TaskErasedData{}, history.PatchRecordedData{}, history.TaskContinuedData{}, history.TaskForkedData{},
		history.SelectMatchedData{},
		history.StreamClosedData{},
		history.UpdateAcceptedData{}, history.UpdateCompletedData{},
		history.BudgetReservedData{}, history.BudgetSettledData{}, history.BudgetRefusedData{}, history.BudgetRaisedData{},
		history.ModelLimitWaitedData{},
		history.RemoteStepDispatchedData{}, history.RemoteStepCompletedData{}, history.RemoteStepFailedData{}, history.RemoteWaitStartedData{},
	}
	require.Len(t, payloads, len(history.Types))
	for i, p := range payloads {
		require.Equal(t, history.Types[i], history.Event{Data: p}.Type())
	}
}

func TestReleasedAttemptsDoNotCountAgainstMaxAttempts(t *testing.T) {
	t.Parallel()
	state, err := history.Replay(historytest.Build(
		historytest.Scheduled(),
		historytest.Started(1, 1), historytest.Released(1, 1),
		historytest.Started(2, 2), historytest.Retry(2, "503"),
		historytest.Started(3, 3), historytest.Released(3, 3),
		historytest.Started(4, 4),
	))
	require.NoError(t, err)
	require.Equal(t, 4, state.Attempt)
	require.Equal(t, 2, state.Released)
	require.Equal(t, 2, state.AttemptsUsed())
}

func TestApplyAllEqualsRepeatedApplyAndDoesNotAlias(t *testing.T) {
	t.Parallel()
	events := historytest.Build(
		historytest.Scheduled(), historytest.Started(1, 1),
		historytest.Step(1, 0, "a"), historytest.Step(1, 1, "b"), historytest.Step(1, 2, "c"),
		historytest.Completed(1),
	)
	base, err := history.Replay(events[:3])
	require.NoError(t, err)
	want := base
	for _, e := range events[3:] {
		want, err = history.Apply(want, e)
		require.NoError(t, err)
	}
	got, err := history.ApplyAll(base, events[3:])
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Len(t, base.Steps, 1, "the state applied to is unchanged")

	// A bad event leaves the state as it was.
	bad := append([]history.Event{}, events[3:]...)
	bad[1].Seq = 99
	same, err := history.ApplyAll(base, bad)
	require.True(t, errors.Is(err, history.ErrInvalidHistory))
	require.Equal(t, base, same)
}

// task_erased ends a finished task's history: it keeps the outcome and
// times, and nothing may follow it; an unfinished task is not erased, nor
// one erased already.
func TestTaskErasedRules(t *testing.T) {
	t.Parallel()
	erased := historytest.E{Data: history.TaskErasedData{By: "dpo", Reason: "request"}}
	done, err := history.Replay(historytest.Build(historytest.Scheduled(), historytest.Started(1, 1), historytest.Completed(1)))
	require.NoError(t, err)
	s, err := history.Replay(historytest.Build(historytest.Scheduled(), historytest.Started(1, 1), historytest.Completed(1), erased))
	require.NoError(t, err)
	require.True(t, s.Erased)
	require.Equal(t, history.StatusCompleted, s.Status)
	require.Equal(t, done.FinishedAt, s.FinishedAt)

	for name, events := range map[string][]historytest.E{
		"running":      {historytest.Scheduled(), historytest.Started(1, 1), erased},
		"pending":      {historytest.Scheduled(), erased},
		"twice":        {historytest.Scheduled(), historytest.Started(1, 1), historytest.Completed(1), erased, erased},
		"requeued":     {historytest.Scheduled(), historytest.Started(1, 1), historytest.DeadLettered(1, "gave up"), erased, historytest.Requeued("again")},
		"compensated":  {historytest.Scheduled(), historytest.Started(1, 1), historytest.Completed(1), erased, {Data: history.CompensationRequestedData{By: "ops"}}},
		"signal after": {historytest.Scheduled(), historytest.Started(1, 1), historytest.Completed(1), erased, historytest.Signal("x", "", "")},
	} {
		_, err := history.Replay(historytest.Build(events...))
		require.ErrorIs(t, err, history.ErrInvalidHistory, name)
	}
}

// Parallel steps that finish while one before them failed are on record
// ahead of it (State.Ahead); they join Steps once it is recorded, in a
// later attempt. Steps ahead neither reset the failing step's budget nor
// may be recorded twice; they can be compensated; no timer may start
// before them.
func TestStepsRecordedAheadOfAGap(t *testing.T) {
	t.Parallel()
	compensable := func(e historytest.E) historytest.E {
		p := e.Data.(history.StepCompletedData)
		p.Compensable = true
		e.Data = p
		return e
	}
	failedAttempt := []historytest.E{scheduled(), started(1, 1), step(1, 0, "plan"),
		compensable(step(1, 3, "ocr")), step(1, 2, "ocr"), retry(1, "ocr of item 0 failed")}
	s := mustReplay(t, historytest.Build(failedAttempt...))
	require.Len(t, s.Steps, 1)
	require.Equal(t, []int{2, 3}, positionsOf(s.Ahead))
	require.Equal(t, history.Budget{Attempts: 1, Since: at(3)}, s.Budget, "steps ahead do not restart the budget of the step before them")
	got, ok := s.StepAt(3)
	require.True(t, ok)
	require.Equal(t, "ocr", got.Name)
	_, ok = s.StepAt(1)
	require.False(t, ok)
	require.Equal(t, []int{0, 2, 3}, positionsOf(s.CompletedSteps()))

	s = mustReplay(t, historytest.Build(append(failedAttempt, started(2, 2), step(2, 1, "ocr"), step(2, 4, "merge"))...))
	require.Equal(t, []int{0, 1, 2, 3, 4}, positionsOf(s.Steps), "the gap closed: the steps ahead follow on")
	require.Nil(t, s.Ahead)

	withCompensation := append(failedAttempt, started(2, 2), historytest.E{Attempt: 2, Data: history.CompensationStartedData{Reason: history.CompensateFailed, Steps: []int{3}}},
		historytest.E{Attempt: 2, Data: history.StepCompensatedData{Position: 3, Name: "ocr"}})
	s = mustReplay(t, historytest.Build(withCompensation...))
	require.Equal(t, []int{3}, s.Compensation.Done)

	for name, tail := range map[string][]historytest.E{
		"twice ahead":                    {started(2, 2), step(2, 3, "ocr")},
		"timer before a step":            {started(2, 2), {Attempt: 2, Data: history.TimerStartedData{Position: 1, FireAt: at(9)}}},
		"compensate a gap":               {started(2, 2), {Attempt: 2, Data: history.CompensationStartedData{Reason: history.CompensateFailed, Steps: []int{1}}}},
		"compensate uncompensable ahead": {started(2, 2), {Attempt: 2, Data: history.CompensationStartedData{Reason: history.CompensateFailed, Steps: []int{2}}}},
	} {
		_, err := history.Replay(historytest.Build(append(slices.Clone(failedAttempt), tail...)...))
		require.ErrorIs(t, err, history.ErrInvalidHistory, name)
	}
}

func positionsOf(steps []history.Step) []int {
	var out []int
	for _, s := range steps {
		out = append(out, s.Position)
	}
	return out
}
