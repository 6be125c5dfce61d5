package history_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

var (
	seedFlag  = flag.Uint64("history.seed", 1, "first seed of TestReplayPropertiesSeeded")
	seedsFlag = flag.Int("history.seeds", 200, "how many seeds TestReplayPropertiesSeeded runs")
)

// Properties of every valid history, on histories drawn by rapid. On failure
// rapid prints the seed to reproduce it with (-rapid.seed) and the log below
// shows the shrunk history.
func TestReplayProperties(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(rt *rapid.T) {
		events := historytest.Draw(rt, historytest.Opts{})
		rt.Logf("history:\n%s", historytest.Dump(events))
		checkProperties(rt, events)
	})
}

// The same properties on longer histories from math/rand/v2, one seed per
// history: run a failing one alone with -history.seed=N -history.seeds=1.
func TestReplayPropertiesSeeded(t *testing.T) {
	t.Parallel()

	opts := historytest.Opts{MaxAttempts: 8, MaxSteps: 12}
	for i := range *seedsFlag {
		seed := *seedFlag + uint64(i)
		events := historytest.FromSeed(seed, opts)
		checkProperties(withContext{t, func() string {
			return fmt.Sprintf("seed %d (rerun with -run=%s -history.seed=%d -history.seeds=1), history:\n%s",
				seed, t.Name(), seed, historytest.Dump(events))
		}}, events)
		if t.Failed() {
			return
		}
	}
}

// The generator itself: same seed, same history; and it reaches every event
// type and every terminal status.
func TestGenerator(t *testing.T) {
	t.Parallel()

	require.Equal(t, historytest.FromSeed(7, historytest.Opts{}), historytest.FromSeed(7, historytest.Opts{}))

	types := map[history.Type]int{}
	statuses := map[history.Status]int{}
	for seed := range uint64(500) {
		events := historytest.FromSeed(seed, historytest.Opts{})
		for _, e := range events {
			types[e.Type()]++
		}
		s := mustReplay(t, events)
		statuses[s.Status]++
	}
	for _, typ := range history.Types {
		require.Positive(t, types[typ], "no %s generated", typ)
	}
	for _, st := range []history.Status{
		history.StatusPending, history.StatusRunning, history.StatusRetrying,
		history.StatusCompleted, history.StatusFailed, history.StatusDeadLettered, history.StatusCancelled, history.StatusExpired,
		history.StatusContinued,
	} {
		require.Positive(t, statuses[st], "no history ends %s", st)
	}

	complete := historytest.FromSeed(3, historytest.Opts{Complete: true})
	require.True(t, mustReplay(t, complete).Status.Terminal())

	for _, n := range []int{1, 2, 10, 1000} {
		long := historytest.Long(n, 1)
		require.Len(t, long, n)
		s := mustReplay(t, long)
		require.False(t, s.Status.Terminal())
	}
}

// withContext adds a description of the failing input to every failure.
type withContext struct {
	*testing.T
	context func() string
}

func (c withContext) Errorf(format string, args ...any) {
	c.T.Helper()
	c.T.Errorf(format+"\n%s", append(args, c.context())...)
}

// checkProperties asserts what holds of every valid history.
func checkProperties(t require.TestingT, events []history.Event) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	n := len(events)
	require.NotZero(t, n)

	// The generator's promises: seq 1..n, UTC microsecond times that do not
	// go back, nothing after a terminal event.
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq)
		require.Equal(t, time.UTC, e.At.Location())
		require.Equal(t, e.At, e.At.Truncate(time.Microsecond))
		if i > 0 {
			require.False(t, e.At.Before(events[i-1].At), "event %d goes back in time", e.Seq)
		}
	}
	before, err := historytest.EncodeEvents(events)
	require.NoError(t, err)

	// Replay succeeds.
	s, err := history.Replay(events)
	require.NoError(t, err)
	require.Equal(t, int64(n), s.LastSeq)
	require.Equal(t, events[n-1].At, s.UpdatedAt)
	require.Equal(t, events[0].At, s.CreatedAt)

	// It equals the state built event by event, and the fold keeps its
	// invariants at every step.
	var inc history.State
	for i, e := range events {
		next, err := history.Apply(inc, e)
		require.NoError(t, err, "event %d", e.Seq)
		require.Equal(t, e.Seq, next.LastSeq)
		require.GreaterOrEqual(t, next.Attempt, inc.Attempt, "attempt went down at event %d", e.Seq)
		require.GreaterOrEqual(t, next.Lease.Epoch, inc.Lease.Epoch, "lease epoch went down at event %d", e.Seq)
		require.GreaterOrEqual(t, len(next.Steps), len(inc.Steps), "steps were lost at event %d", e.Seq)
		require.GreaterOrEqual(t, next.Budget.Attempts, 0, "budget attempts below zero at event %d", e.Seq)
		require.LessOrEqual(t, next.Budget.Attempts, next.AttemptsUsed(), "budget counts more attempts than were made at event %d", e.Seq)
		for pos, st := range next.Steps {
			require.Equal(t, pos, st.Position)
		}
		switch {
		case e.Type() == history.TaskForked:
			// A fork changes nothing of the original but its forks.
			require.Equal(t, inc.Status, next.Status)
			require.Equal(t, inc.FinishedAt, next.FinishedAt)
			require.Len(t, next.Forks, len(inc.Forks)+1)
		case e.Type() == history.TaskErased:
			// The erasure ends the log; the task finished when it did.
			require.Equal(t, n-1, i, "an event follows task_erased")
			require.Equal(t, inc.FinishedAt, next.FinishedAt)
			require.True(t, next.Erased)
		case next.Status.Terminal():
			// Only an operator's requeue (of a dead letter), a request to
			// compensate (a completed task) or an erasure may follow a
			// terminal event.
			if i < n-1 && events[i+1].Type() != history.TaskErased && events[i+1].Type() != history.TaskForked {
				reopen := map[history.Status]history.Type{
					history.StatusDeadLettered: history.TaskRequeued,
					history.StatusCompleted:    history.CompensationRequested,
				}[next.Status]
				require.NotEmpty(t, reopen, "a terminal event must be the last")
				require.Equal(t, reopen, events[i+1].Type(), "only %s follows a %s task", reopen, next.Status)
			}
			require.Equal(t, e.At, next.FinishedAt)
		default:
			require.True(t, next.FinishedAt.IsZero())
		}
		if next.Lease.Owner != "" {
			require.Equal(t, history.StatusRunning, next.Status, "only a running task holds a lease")
		}
		inc = next
	}
	require.Equal(t, s, inc)

	// Replay is repeatable and leaves its input alone.
	again, err := history.Replay(events)
	require.NoError(t, err)
	require.Equal(t, s, again)
	after, err := historytest.EncodeEvents(events)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "replay modified its input")

	// Every payload survives encode→decode, and so does the whole log; the
	// decoded log replays to the same state.
	for _, e := range events {
		data, err := history.Encode(e.Data)
		require.NoError(t, err)
		p, err := history.Decode(e.Type(), data)
		require.NoError(t, err, "event %d: %s", e.Seq, data)
		require.Equal(t, e.Data, p, "event %d: %s", e.Seq, data)
		again, err := history.Encode(p)
		require.NoError(t, err)
		require.Equal(t, string(data), string(again))
	}
	decoded, err := historytest.DecodeEvents(before)
	require.NoError(t, err)
	require.Equal(t, events, decoded)
	fromDecoded, err := history.Replay(decoded)
	require.NoError(t, err)
	require.Equal(t, s, fromDecoded)

	// Replaying a prefix and applying the rest gives the full replay, and
	// leaves the prefix's state as it was.
	for k := 1; k <= n; k++ {
		prefix, err := history.Replay(events[:k])
		require.NoError(t, err, "prefix of %d", k)
		snapshot, err := history.Replay(events[:k])
		require.NoError(t, err)
		cur := prefix
		for _, e := range events[k:] {
			cur, err = history.Apply(cur, e)
			require.NoError(t, err, "event %d after a prefix of %d", e.Seq, k)
		}
		require.Equal(t, s, cur, "prefix of %d", k)
		require.Equal(t, snapshot, prefix, "applying the suffix changed the prefix's state (prefix of %d)", k)
	}

	// Any sequence number but the next is refused.
	last := events[n-1]
	for _, seq := range []int64{0, 1, last.Seq, last.Seq + 2} {
		e := history.Event{Seq: seq, At: last.At, Data: history.TaskFailedData{}}
		_, err := history.Apply(s, e)
		requireMarked(t, err)
	}

	if s.Status.Terminal() {
		// Terminal is final: nothing can follow but a fork (of a step on
		// record, of a task not erased), which changes no status.
		for _, e := range candidates(s, last.At) {
			if e.Type() == history.TaskForked {
				got, err := history.Apply(s, e)
				if err == nil {
					require.Equal(t, s.Status, got.Status)
				}
				continue
			}
			got, err := history.Apply(s, e)
			requireMarked(t, err)
			require.Contains(t, err.Error(), "task is already "+string(s.Status))
			require.Equal(t, s, got)
		}
		return
	}

	// Any task not yet terminal can still be ended, and the lifecycle can
	// always go on.
	var compensated []int
	if s.Compensation != nil {
		compensated = s.Compensation.Done
	}
	for _, p := range []history.Payload{history.TaskFailedData{Compensated: compensated}, history.TaskDeadLetteredData{}} {
		got, err := history.Apply(s, history.Event{Seq: last.Seq + 1, At: last.At, Attempt: s.Attempt, Data: p})
		require.NoError(t, err)
		require.True(t, got.Status.Terminal())
	}
	var next history.Event
	switch {
	case s.Status == history.StatusPending || s.Status == history.StatusRetrying:
		next = history.Event{Attempt: s.Attempt + 1, Data: history.AttemptStartedData{WorkerID: "w", LeaseEpoch: s.Lease.Epoch + 1}}
	case s.Status == history.StatusRunning && s.Lease.Owner != "" && s.Compensation != nil && s.Compensation.Started:
		if pending := s.Compensation.Pending; len(pending) > 0 {
			next = history.Event{Attempt: s.Attempt, Data: history.StepCompensatedData{Position: pending[0], Name: s.Steps[pending[0]].Name}}
		} else {
			next = history.Event{Attempt: s.Attempt, Data: history.TaskCancelledData{Compensated: compensated}}
		}
	case s.Status == history.StatusRunning && s.Lease.Owner != "" && (s.CancelRequested || s.Compensation != nil):
		next = history.Event{Attempt: s.Attempt, Data: history.CompensationStartedData{Reason: history.CompensateCancelled}}
	case s.Status == history.StatusRunning && s.Lease.Owner != "" && s.Timer != nil:
		// The workflow sleeps at the next position: the timer fires there.
		next = history.Event{Attempt: s.Attempt, Data: history.TimerFiredData{Position: s.Timer.Position}}
	case s.Status == history.StatusRunning && s.Lease.Owner != "" && s.Wait != nil && s.Wait.Select != nil:
		// A select waits: select_matched ends it, which this does not
		// build (wait_timed_out is a receive's alone).
	case s.Status == history.StatusRunning && s.Lease.Owner != "" && s.Wait != nil:
		// A receive waits: its deadline passed, or a signal comes.
		next = history.Event{Attempt: s.Attempt, Data: history.WaitTimedOutData{Name: s.Wait.Name, Position: s.Wait.Position}}
	case s.Status == history.StatusRunning && s.Lease.Owner != "":
		next = history.Event{Attempt: s.Attempt, Data: history.StepCompletedData{Position: freePosition(s), Name: "next"}}
	}
	if next.Data != nil {
		next.Seq, next.At = last.Seq+1, last.At
		_, err := history.Apply(s, next)
		require.NoError(t, err, "%s cannot follow", next.Type())
	}
}

// freePosition is the first position neither on record nor a remote
// step's.
func freePosition(s history.State) int {
	pos := len(s.Steps)
	for {
		_, done := s.StepAt(pos)
		_, remote := s.RemoteAt(pos)
		if !done && !remote {
			return pos
		}
		pos++
	}
}

// candidates returns one event of each type, in the variants most likely to
// be accepted after s: seq right, attempt current or next, epoch current or
// next, step position next.
func candidates(s history.State, at time.Time) []history.Event {
	next := at.Add(time.Second)
	seq := s.LastSeq + 1
	var out []history.Event
	add := func(attempt int, p history.Payload) {
		out = append(out, history.Event{Seq: seq, At: at, Attempt: attempt, Data: p})
	}
	add(0, history.TaskScheduledData{TaskType: "again", RunAt: at})
	add(0, history.StepCompletedData{Position: len(s.Steps), Name: "copy", CopiedFromSeq: 2})
	add(0, history.TaskForkedData{ForkTaskID: "fork", Position: 0})
	for _, attempt := range []int{s.Attempt, s.Attempt + 1} {
		for _, epoch := range []int64{s.Lease.Epoch, s.Lease.Epoch + 1} {
			add(attempt, history.AttemptStartedData{WorkerID: "w", LeaseEpoch: epoch, LeaseExpiresAt: next})
			add(attempt, history.LeaseExpiredData{WorkerID: "w", LeaseEpoch: epoch, NextRunAt: next})
			add(attempt, history.TaskReleasedData{WorkerID: "w", LeaseEpoch: epoch})
		}
		add(attempt, history.StepCompletedData{Position: len(s.Steps), Name: "late"})
		add(attempt, history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Transient}, NextRunAt: &next})
		add(attempt, history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Permanent}})
		add(attempt, history.TaskCompletedData{})
		add(attempt, history.TaskFailedData{})
		add(attempt, history.TaskDeadLetteredData{})
		add(attempt, history.CompensationStartedData{Reason: history.CompensateCancelled})
		add(attempt, history.TaskCancelledData{})
	}
	add(0, history.CancelRequestedData{By: "api"})
	add(0, history.SignalReceivedData{Name: "approval"})
	add(s.Attempt, history.PatchRecordedData{PatchID: "p", Position: len(s.Steps)})
	add(s.Attempt, history.PatchRecordedData{PatchID: "patch-0", Position: len(s.Steps)})
	add(0, history.UpdateAcceptedData{UpdateID: "upd-x", Name: "reassign"})
	for _, u := range s.PendingUpdates() {
		add(s.Attempt, history.UpdateCompletedData{UpdateID: u.ID, Output: json.RawMessage(`1`)})
	}
	return out
}

func requireMarked(t require.TestingT, err error) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.Error(t, err)
	require.True(t, errors.Is(err, history.ErrInvalidHistory), "error not marked ErrInvalidHistory: %+v", err)
}

// Damaged histories (an event dropped, repeated, moved, renumbered or
// reassigned) never make Replay panic; if they are refused, the error is
// marked; and Replay agrees with the event-by-event fold on them too.
func TestReplayDamaged(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(rt *rapid.T) {
		events := historytest.Draw(rt, historytest.Opts{Complete: true})
		damaged := damage(rt, events)
		rt.Logf("damaged history:\n%s", historytest.Dump(damaged))

		var (
			s   history.State
			err error
		)
		require.NotPanics(rt, func() { s, err = history.Replay(damaged) })
		var inc history.State
		var incErr error
		for _, e := range damaged {
			var next history.State
			require.NotPanics(rt, func() { next, incErr = history.Apply(inc, e) })
			if incErr != nil {
				break
			}
			inc = next
		}
		if len(damaged) == 0 {
			requireMarked(rt, err)
			return
		}
		require.Equal(rt, inc, s)
		if err != nil {
			requireMarked(rt, err)
			require.Equal(rt, incErr.Error(), err.Error())
			return
		}
		require.NoError(rt, incErr)
	})
}

func damage(t *rapid.T, events []history.Event) []history.Event {
	n := len(events)
	out := append([]history.Event(nil), events...)
	i := rapid.IntRange(0, n-1).Draw(t, "i")
	renumber := func() {
		for k := range out {
			out[k].Seq = int64(k + 1)
		}
	}
	switch rapid.IntRange(0, 6).Draw(t, "damage") {
	case 0: // drop an event
		out = append(out[:i], out[i+1:]...)
	case 1: // drop an event and close the gap
		out = append(out[:i], out[i+1:]...)
		renumber()
	case 2: // repeat an event
		out = append(out[:i+1], out[i:]...)
		renumber()
	case 3: // move an event
		j := rapid.IntRange(0, n-1).Draw(t, "j")
		e := out[i]
		out = append(out[:i], out[i+1:]...)
		out = append(out[:j], append([]history.Event{e}, out[j:]...)...)
		renumber()
	case 4: // give an event another attempt
		out[i].Attempt += rapid.SampledFrom([]int{-1, 1, 2}).Draw(t, "delta")
	case 5: // give an event another seq
		out[i].Seq = rapid.Int64Range(-1, int64(n)+1).Draw(t, "seq")
	case 6: // append events to a complete history
		extra := historytest.Draw(t, historytest.Opts{})
		out = append(out, extra...)
		renumber()
	}
	return out
}

// TestApplyLeavesItsInputAlone: applying events to a state (as a store
// does to a parent state it keeps between appends) never changes that
// state, whatever the events write in place.
func TestApplyLeavesItsInputAlone(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		events := historytest.FromSeed(seed, historytest.Opts{Complete: true})
		for cut := 1; cut < len(events); cut++ {
			base := mustReplay(t, events[:cut])
			again := mustReplay(t, events[:cut])
			if _, err := history.ApplyAll(base, events[cut:]); err != nil {
				t.Fatalf("seed %d: apply events %d..: %v", seed, cut+1, err)
			}
			for i := cut; i < len(events); i++ {
				_, _ = history.Apply(base, events[i])
			}
			require.Equal(t, again, base, "seed %d: applying events %d.. changed the state they were applied to", seed, cut+1)
		}
	}
}
