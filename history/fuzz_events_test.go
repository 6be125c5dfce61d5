package history_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/stretchr/testify/require"
)

// FuzzEventJSON: Event.UnmarshalJSON never panics; what it refuses is
// marked ErrInvalidHistory and leaves the event alone; it agrees with
// json.Unmarshal; what it accepts marshals (MarshalJSON) to JSON that
// unmarshals again, and from then on the round trip is exact.
func FuzzEventJSON(f *testing.F) {
	for _, data := range corpus(f) {
		var lines []json.RawMessage
		if json.Unmarshal(data, &lines) != nil {
			continue
		}
		for _, line := range lines {
			f.Add([]byte(line))
		}
	}
	for seed := range uint64(4) {
		for _, e := range historytest.FromSeed(seed, historytest.Opts{Complete: true}) {
			b, err := json.Marshal(e)
			require.NoError(f, err)
			f.Add(b)
		}
	}
	for _, s := range []string{
		`null`, `{}`, `[]`, `"x"`, `{"seq":1}`,
		`{"seq":1,"type":"task_completed","at":"2026-01-02T03:04:05+01:00","data":{"v":1}}`,
		`{"seq":1,"type":"task_completed","at":"2026-01-02T03:04:05Z","data":{"v":2}}`,
		`{"seq":1,"type":"task_completed","at":"2026-01-02T03:04:05Z","data":null}`,
		`{"SEQ":-1,"Type":"task_completed","AT":"0000-01-01T00:00:00+23:59","data":{"V":1,"OUTPUT":{ "a" : [1, 2] }}}`,
		`{"seq":1,"type":"task_completed","at":"2026-01-02T03:04:05Z","data":{"v":1}} `,
		`{"seq":1,"type":"task_completed","at":"2026-01-02T03:04:05Z","data":{"v":1},"extra":true}`,
		`{"seq":9223372036854775807,"type":"attempt_started","at":"9999-12-31T23:59:59.999999999-23:59","attempt":-3,"data":{"v":1,"lease_expires_at":"0001-01-01T00:00:00Z"}}`,
		`{"seq":1,"type":"task_scheduled","at":"2026-01-02T03:04:05Z","data":{"v":1,"task_type":"t","labels":{"a":"\ud800"},"input":[]}}`,
		`{"seq":3,"type":"stream_closed","at":"2026-01-02T03:04:05Z","attempt":1,"data":{"v":1,"name":"tokens","position":-1,"chunks":2,"bytes":9,"outcome":"rewound"}}`,
		`{"seq":2,"type":"update_completed","at":"2026-01-02T03:04:05Z","attempt":1,"data":{"v":1,"update_id":"u","at":{"call":1,"step":0,"receive":0,"child":0},"error":{"class":"permanent","message":"no"}}}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var e history.Event
		err := e.UnmarshalJSON(data)

		// json.Unmarshal checks the syntax first and then calls
		// UnmarshalJSON: the two agree on every valid document.
		var viaStd history.Event
		stdErr := json.Unmarshal(data, &viaStd)
		if err != nil {
			requireMarked(t, err)
			require.Equal(t, history.Event{}, e, "a refused event was written to")
			require.Error(t, stdErr)
			return
		}
		require.True(t, json.Valid(data), "accepted invalid JSON")
		require.NoError(t, stdErr)
		require.Equal(t, e, viaStd)
		require.NotNil(t, e.Data)
		require.Contains(t, history.Types, e.Type())

		b1, err := json.Marshal(e)
		require.NoError(t, err, "accepted event does not marshal: %#v", e)
		require.True(t, json.Valid(b1), "%s", b1)

		var e2 history.Event
		require.NoError(t, json.Unmarshal(b1, &e2), "%s", b1)
		require.Equal(t, e.Seq, e2.Seq)
		require.Equal(t, e.Attempt, e2.Attempt)
		require.True(t, e.At.Equal(e2.At), "at %s became %s", e.At, e2.At)
		require.Equal(t, e.Type(), e2.Type())

		b2, err := json.Marshal(e2)
		require.NoError(t, err)
		require.Equal(t, string(b1), string(b2))
		var e3 history.Event
		require.NoError(t, json.Unmarshal(b2, &e3))
		require.Equal(t, e2, e3)
	})
}

// FuzzReplayEvents: event sequences built from the fuzzer's bytes, from
// scratch or by damaging a generated valid history (dropping, repeating,
// moving, renumbering and rewriting events, appending events chosen to be
// nearly valid after the state so far). Replay never panics and returns a
// state or an error marked ErrInvalidHistory; it agrees with folding Apply
// one event at a time, and with ApplyAll; the replay of a valid prefix
// equals the fold's state at that point (checked at a few lengths), and
// the fold keeps the state's invariants at every event; the input is left
// alone; and an encode→decode round trip replays the same.
func FuzzReplayEvents(f *testing.F) {
	for seed := range uint64(12) {
		f.Add(seed, []byte{byte(seed)})
		f.Add(seed, []byte{byte(seed) | 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1})
	}
	// From scratch: appends of nearly valid events only.
	f.Add(uint64(0), []byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0})
	f.Add(uint64(7), []byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 12, 0, 0, 0, 12})
	// Generated histories, damaged (an op byte b >= 176 is edit 5+b%7):
	// an event dropped and the rest renumbered; one repeated and one
	// moved; an attempt changed and a payload replaced, then appends.
	f.Add(uint64(3), []byte{0x83, 182, 2, 185})
	f.Add(uint64(5), []byte{0x85, 183, 4, 184, 1, 6})
	f.Add(uint64(9), []byte{0x8a, 187, 3, 1, 3, 188, 5, 200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint64(11), []byte{0x01, 186, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		if len(ops) > maxFuzzOps {
			ops = ops[:maxFuzzOps] // more cannot matter, and would slow minimization
		}
		events := buildEvents(seed, &fuzzBytes{b: ops})
		before := historytest.Dump(events)
		defer func() {
			if t.Failed() {
				t.Logf("events:\n%s", before)
			}
		}()

		s, replayErr := history.Replay(events)

		// The fold, one event at a time; states[k] is the state after the
		// first k events, for every valid prefix.
		states := []history.State{{}}
		var incErr error
		for _, e := range events {
			cur := states[len(states)-1]
			next, err := history.Apply(cur, e)
			if err != nil {
				requireMarked(t, err)
				require.Equal(t, cur, next, "a refused event changed the state")
				incErr = err
				break
			}
			requireStep(t, cur, next, e)
			states = append(states, next)
		}
		valid := len(states) - 1
		require.Equal(t, states[valid], s)
		if len(events) == 0 {
			requireMarked(t, replayErr)
		} else if replayErr != nil {
			requireMarked(t, replayErr)
			require.Error(t, incErr)
			require.Equal(t, incErr.Error(), replayErr.Error())
		} else {
			require.NoError(t, incErr)
			require.Equal(t, len(events), valid)
			require.Equal(t, int64(len(events)), s.LastSeq)
		}

		all, allErr := history.ApplyAll(history.State{}, events)
		if incErr != nil {
			require.Error(t, allErr)
			require.Equal(t, incErr.Error(), allErr.Error())
			require.Equal(t, history.State{}, all)
		} else {
			require.NoError(t, allErr)
			require.Equal(t, s, nilSteps(all))
		}

		// A valid prefix replays to the fold's state at that point (so no
		// later Apply wrote into a state handed out before), and applying
		// the rest of the valid events to it gives the whole. Checked at a
		// few lengths, not all: the fuzzer's speed matters more.
		for _, k := range prefixLengths(valid) {
			prefix, err := history.Replay(events[:k])
			require.NoError(t, err, "valid prefix of %d", k)
			require.Equal(t, states[k], prefix, "prefix of %d", k)
			rest, err := history.ApplyAll(prefix, events[k:valid])
			require.NoError(t, err, "prefix of %d", k)
			require.Equal(t, states[valid], nilSteps(rest), "prefix of %d", k)
			require.Equal(t, states[k], prefix, "ApplyAll changed its input state (prefix of %d)", k)
		}

		require.Equal(t, before, historytest.Dump(events), "replay modified its input")

		// Encoding and decoding the events changes nothing a replay sees.
		if !allOurPayloads(events) {
			return
		}
		enc, err := historytest.EncodeEvents(events)
		require.NoError(t, err)
		decoded, err := historytest.DecodeEvents(enc)
		require.NoError(t, err, "%s", enc)
		s2, err2 := history.Replay(decoded)
		if replayErr != nil {
			require.Error(t, err2, "%s", enc)
			require.Equal(t, replayErr.Error(), err2.Error())
		} else {
			require.NoError(t, err2, "%s", enc)
		}
		require.Equal(t, s, s2)
	})
}

// prefixLengths returns the prefix lengths FuzzReplayEvents checks of a
// valid history of n events: the first two, the last two, and thirds.
func prefixLengths(n int) []int {
	ks := []int{1, 2, n / 3, n / 2, 2 * n / 3, n - 1, n}
	slices.Sort(ks)
	ks = slices.Compact(ks)
	return slices.DeleteFunc(ks, func(k int) bool { return k < 1 || k > n })
}

// requireStep checks what holds of every transition Apply accepts.
func requireStep(t *testing.T, prev, next history.State, e history.Event) {
	t.Helper()
	require.Equal(t, e.Seq, next.LastSeq)
	require.Equal(t, e.At, next.UpdatedAt)
	require.GreaterOrEqual(t, next.Attempt, prev.Attempt, "attempt went down at event %d", e.Seq)
	require.GreaterOrEqual(t, next.Lease.Epoch, prev.Lease.Epoch, "lease epoch went down at event %d", e.Seq)
	require.GreaterOrEqual(t, len(next.Steps), len(prev.Steps), "steps were lost at event %d", e.Seq)
	for i := range prev.Steps {
		require.Equal(t, prev.Steps[i], next.Steps[i], "steps were rewritten at event %d", e.Seq)
	}
	for pos, st := range next.Steps {
		require.Equal(t, pos, st.Position)
	}
	require.GreaterOrEqual(t, next.Released, 0)
	require.LessOrEqual(t, next.Released, next.Attempt)
	require.GreaterOrEqual(t, next.Budget.Attempts, 0, "budget attempts below zero at event %d", e.Seq)
	require.LessOrEqual(t, next.Budget.Attempts, next.AttemptsUsed(), "budget counts more attempts than were made at event %d", e.Seq)
	require.NotEmpty(t, next.Status)
	switch {
	case e.Type() == history.TaskErased:
		// An erasure changes no outcome: the task finished when it did.
		require.True(t, prev.Status.Terminal())
		require.Equal(t, prev.Status, next.Status)
		require.Equal(t, prev.FinishedAt, next.FinishedAt)
		require.True(t, next.Erased)
	case e.Type() == history.TaskForked:
		// A fork changes nothing of the original but its list of forks.
		require.Equal(t, prev.Status, next.Status)
		require.Equal(t, prev.FinishedAt, next.FinishedAt)
		require.Len(t, next.Forks, len(prev.Forks)+1)
	case next.Status.Terminal():
		require.Equal(t, e.At, next.FinishedAt)
		require.Empty(t, next.Lease.Owner)
		require.Equal(t, next.Status == history.StatusContinued, next.ContinuedAs != "", "a %s task names the run it continued as: %q", next.Status, next.ContinuedAs)
	default:
		require.True(t, next.FinishedAt.IsZero())
	}
	if next.Lease.Owner != "" {
		require.Equal(t, history.StatusRunning, next.Status, "only a running task holds a lease")
	}
	if prev.Status.Terminal() {
		require.Contains(t, []history.Type{history.TaskRequeued, history.CompensationRequested, history.TaskErased, history.TaskForked}, e.Type(),
			"only a requeue, a compensation request, an erasure or a fork follows a %s task", prev.Status)
	}
	if next.Timer != nil {
		require.Equal(t, len(next.Steps), next.Timer.Position, "a timer runs at a position other than the next")
	}
	if next.Wait != nil {
		require.Nil(t, next.Timer, "a receive waits while a timer runs")
		require.Equal(t, *next.Wait, next.Waits[len(next.Waits)-1], "the receive waiting is not the last that waited")
	}
	if e.Type() == history.SignalReceived || e.Type() == history.ChildFinished {
		require.Equal(t, prev.Status, next.Status, "a %s changed the task's status", e.Type())
	}
	for i, c := range next.Children {
		require.Equal(t, i, c.Position, "child %d recorded at position %d", c.Position, i)
	}
	if w := next.ChildWait; w != nil {
		require.Equal(t, history.StatusPending, next.Status, "a task awaits children while %s", next.Status)
		for _, pos := range w.Positions {
			require.False(t, next.Children[pos].Finished && w.Finished == 0, "a task awaits child %d, which has finished", pos)
		}
		require.Less(t, w.Finished, w.Count, "a wait whose children all finished stands")
	}
	if c := next.Compensation; c != nil && c.Started {
		for _, pos := range append(slices.Clone(c.Pending), c.Done...) {
			require.True(t, pos >= 0 && pos < len(next.Steps) && next.Steps[pos].Compensable,
				"compensation lists step %d, not a completed compensable step", pos)
		}
	}
}

// nilSteps returns s with no steps as nil: ApplyAll hands back an empty
// slice where a fold from nothing has none, which means the same.
func nilSteps(s history.State) history.State {
	if len(s.Steps) == 0 {
		s.Steps = nil
	}
	return s
}

// allOurPayloads reports whether every event has a payload of this
// package's own (value) types, the only ones that encode and decode.
func allOurPayloads(events []history.Event) bool {
	for _, e := range events {
		if e.Data == nil {
			return false
		}
		if tp := reflect.TypeOf(e.Data); tp.Kind() != reflect.Struct || tp.PkgPath() != reflect.TypeFor[history.Event]().PkgPath() {
			return false
		}
	}
	return true
}

// fuzzBytes hands out the fuzzer's bytes as choices; once they run out,
// every choice is the first.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzBytes) intn(n int) int { return int(r.next()) % n }

// pickOf returns one of pool: the first (the choice most likely to be
// right) for most byte values, any for the others.
func pickOf[T any](r *fuzzBytes, pool ...T) T {
	b := int(r.next())
	if b < 192 {
		return pool[0]
	}
	return pool[b%len(pool)]
}

// plausible lists the event types that may follow a task in state s.
func plausible(s history.State) []history.Type {
	switch {
	case s.LastSeq == 0:
		return []history.Type{history.TaskScheduled}
	case s.Status == history.StatusDeadLettered:
		return []history.Type{history.TaskRequeued, history.TaskForked}
	case s.Status == history.StatusCompleted:
		return []history.Type{history.CompensationRequested, history.TaskForked}
	case s.Status == history.StatusPending || s.Status == history.StatusRetrying:
		return []history.Type{history.StepCompleted, history.PatchRecorded, history.TaskForked, history.AttemptStarted, history.AttemptStarted, history.AttemptStarted, history.CancelRequested,
			history.TaskFailed, history.TaskDeadLettered, history.TaskExpired, history.TaskCancelled, history.SignalReceived,
			history.ChildFinished, history.UpdateAccepted, history.BudgetRaised,
			history.RemoteStepCompleted, history.RemoteStepFailed}
	case s.Status == history.StatusRunning && s.Lease.Owner == "":
		return []history.Type{history.TaskFailed, history.TaskDeadLettered, history.TaskCancelled}
	case s.Status == history.StatusRunning && s.Compensation.IsStarted():
		return []history.Type{history.StepCompensated, history.StepCompensated, history.CompensationFailed, history.TaskCancelled,
			history.TaskFailed, history.AttemptFailed, history.LeaseExpired, history.TaskReleased, history.TaskDeadLettered}
	case s.Status == history.StatusRunning:
		return []history.Type{history.StepCompleted, history.StepCompleted, history.AttemptFailed, history.LeaseExpired,
			history.TaskReleased, history.TaskCompleted, history.CancelRequested, history.CompensationStarted,
			history.TimerStarted, history.TimerFired, history.TaskFailed, history.TaskDeadLettered, history.TaskCancelled,
			history.SignalReceived, history.WaitStarted, history.WaitTimedOut,
			history.ChildStarted, history.ChildStarted, history.ChildWaitStarted, history.ChildFinished,
			history.PatchRecorded, history.TaskContinued, history.SelectMatched, history.WaitStarted,
			history.UpdateAccepted, history.UpdateCompleted,
			history.BudgetReserved, history.BudgetSettled, history.BudgetRefused, history.BudgetRaised,
			history.RemoteStepDispatched, history.RemoteWaitStarted, history.RemoteStepCompleted}
	}
	return history.Types
}

// maxFuzzEvents bounds a built history, and maxFuzzOps the bytes read
// to build it (about 20 an event).
const (
	maxFuzzEvents = 64
	maxFuzzOps    = 1024
)

// buildEvents builds an event sequence: the first choice says whether to
// start from the generated history of seed (and how it is generated) or
// from nothing; each further group of choices edits the sequence.
func buildEvents(seed uint64, r *fuzzBytes) []history.Event {
	var events []history.Event
	if mode := r.next(); mode != 0 {
		events = historytest.FromSeed(seed, historytest.Opts{
			Complete:    mode&0x80 != 0,
			MaxSteps:    1 + int(mode&0x3),
			MaxAttempts: 1 + int(mode>>2&0x7),
		})
	}
	// folded is the state events fold to as far as they are valid, and
	// whole whether that is all of them; stale says it is to be
	// recomputed.
	var (
		folded history.State
		whole  bool
		stale  = true
	)
	fold := func(events []history.Event) (history.State, bool) {
		var s history.State
		for _, e := range events {
			next, err := history.Apply(s, e)
			if err != nil {
				return s, false
			}
			s = next
		}
		return s, true
	}
	for len(r.b) > 0 && len(events) < maxFuzzEvents {
		n := len(events)
		op := 0 // mostly an append
		if b := int(r.next()); b >= 176 {
			op = 5 + b%7
		}
		switch {
		case op == 0 || n == 0: // append a nearly valid event
			if stale {
				folded, whole = fold(events)
				stale = false
			}
			e := nextEvent(r, events, folded)
			events = append(events, e)
			if whole {
				next, err := history.Apply(folded, e)
				if whole = err == nil; whole {
					folded = next
				}
			}
			continue
		case op == 5: // drop an event
			i := r.intn(n)
			events = slices.Delete(events, i, i+1)
		case op == 6: // repeat an event
			i := r.intn(n)
			events = slices.Insert(events, i, events[i])
		case op == 7: // move an event
			i, j := r.intn(n), r.intn(n)
			e := events[i]
			events = slices.Insert(slices.Delete(events, i, i+1), j, e)
		case op == 8: // renumber 1..n
			for k := range events {
				events[k].Seq = int64(k + 1)
			}
		case op == 9: // cut the history short
			events = events[:r.intn(n+1)]
		case op == 10: // change an event's seq, attempt or time
			i := r.intn(n)
			delta := int64(r.intn(5)) - 2
			switch r.intn(3) {
			case 0:
				events[i].Seq += delta
			case 1:
				events[i].Attempt += int(delta)
			case 2:
				events[i].At = events[i].At.Add(time.Duration(delta) * time.Hour)
			}
		case op == 11: // give an event another payload
			i := r.intn(n)
			s, _ := fold(events[:i])
			e := nextEvent(r, events[:i], s)
			events[i].Data = e.Data
		}
		stale = true
	}
	return events
}

// foreignPayload is a Payload that is none of the package's.
type foreignPayload struct{ X int }

func (foreignPayload) EventType() history.Type { return history.TaskCompleted }

// nextEvent returns an event to follow events, built from r's choices with
// the state events fold to (as far as they are valid) in view, so most
// events are nearly right: the expected seq, attempt, epoch and position,
// or one off.
func nextEvent(r *fuzzBytes, events []history.Event, s history.State) history.Event {
	at := historytest.Base
	var seq int64 = 1
	if n := len(events); n > 0 {
		at, seq = events[n-1].At, events[n-1].Seq+1
	}
	at = at.Add(time.Duration(r.intn(4)) * time.Second)
	switch pickOf(r, 0, 1, 2) {
	case 1:
		seq--
	case 2:
		seq = int64(r.intn(8)) - 1
	}
	epoch := pickOf(r, s.Lease.Epoch, s.Lease.Epoch+1, s.Lease.Epoch-1, 0)
	position := pickOf(r, len(s.Steps), len(s.Steps)-1, len(s.Steps)+1, 0, -1)
	worker := pickOf(r, s.Lease.Owner, historytest.Worker, "", "w-2")
	by := pickOf(r, "alice@example.com", "")
	later := at.Add(time.Duration(r.intn(3)) * time.Minute)
	output := pickOf(r, json.RawMessage(nil), json.RawMessage(`{"ok":true}`), json.RawMessage(`null`), json.RawMessage(`[1,"ü"]`))
	info := history.ErrorInfo{
		Class:   pickOf(r, history.Transient, history.Permanent, ""),
		Message: pickOf(r, "boom", "", "line1\nline2 ⏱"),
		Status:  pickOf(r, 0, 429, 503),
		Attrs:   pickOf(r, map[string]string(nil), map[string]string{"host": "a"}),
	}
	var done, pending, compensable []int
	if c := s.Compensation; c != nil {
		done, pending = c.Done, c.Pending
	}
	for pos := len(s.Steps) - 1; pos >= 0; pos-- {
		if s.Steps[pos].Compensable {
			compensable = append(compensable, pos)
		}
	}
	positions := func() []int {
		return pickOf(r, slices.Clone(compensable), nil, []int{}, []int{0}, []int{len(s.Steps)}, []int{0, 0}, slices.Clone(done), []int{-1})
	}
	next := pickOf(r, position, -1)
	if len(pending) > 0 {
		next = pickOf(r, pending[0], position, pending[len(pending)-1])
	}
	name := pickOf(r, "reserve", "", history.SleepStepName)
	if next >= 0 && next < len(s.Steps) && r.intn(4) != 0 {
		name = s.Steps[next].Name
	}
	timerPos := position
	if s.Timer != nil && r.intn(4) != 0 {
		timerPos = s.Timer.Position
	}
	// A receive's position counts receives: the one waiting, the next, or
	// one off.
	receivePos := pickOf(r, len(s.Waits), len(s.Waits)+1, len(s.Waits)-1, 0, -1)
	if s.Wait != nil && r.intn(4) != 0 {
		receivePos = s.Wait.Position
	}
	signal := pickOf(r, "approval", "", "other")
	dedup := pickOf(r, "", fmt.Sprintf("d-%d", len(s.Signals)), "d-0")
	// A child's position counts children: the next, an unfinished one,
	// one off.
	childPos := pickOf(r, len(s.Children), len(s.Children)-1, 0, -1, len(s.Children)+1)
	childID := func(pos int) string { return pickOf(r, fmt.Sprintf("child-%d", pos), "", "child-0") }
	childStatus := pickOf(r, history.StatusCompleted, history.StatusFailed, history.StatusCancelled, history.StatusRunning, "", history.StatusContinued)
	var childErr *history.ErrorInfo
	if childStatus != history.StatusCompleted || r.intn(4) == 0 {
		childErr = &info
	}

	var p history.Payload
	types := len(history.Types)
	k := r.intn(types + 3)
	if b := r.next(); b < 224 {
		// Mostly an event type that may follow.
		next := plausible(s)
		k = slices.Index(history.Types, next[r.intn(len(next))])
	}
	switch {
	case k == types:
		p = nil
	case k == types+1:
		p = foreignPayload{X: 1}
	case k == types+2:
		p = pickOf[history.Payload](r, &history.TaskCompletedData{}, (*history.TaskCompletedData)(nil), &history.TaskScheduledData{TaskType: "t"})
	default:
		switch history.Types[k] {
		case history.TaskScheduled:
			sched := history.TaskScheduledData{
				Namespace: "default", TaskType: pickOf(r, "send_invoice", ""), TypeVersion: 1, Queue: "default",
				Input: output, RunAt: later, MaxAttempts: pickOf(r, 3, 0, 1),
				Labels:      pickOf(r, map[string]string(nil), map[string]string{"team": "ap"}),
				FairnessKey: pickOf(r, "", "tenant-1"), FairnessWeight: pickOf(r, 0, 1, history.MaxFairnessWeight, -1, history.MaxFairnessWeight+1),
			}
			if r.intn(2) == 1 {
				sched.Deadline = &later
			}
			sched.ForkedFrom = pickOf(r, nil, nil, &history.ForkOrigin{TaskID: "orig-1", Position: pickOf(r, 0, 1, -1)}, &history.ForkOrigin{})
			p = sched
		case history.AttemptStarted:
			p = history.AttemptStartedData{WorkerID: pickOf(r, historytest.Worker, "", "w-2"),
				LeaseEpoch: pickOf(r, s.Lease.Epoch+1, s.Lease.Epoch+2, s.Lease.Epoch, 0, -1), LeaseExpiresAt: later}
		case history.StepCompleted:
			p = history.StepCompletedData{Position: position, Name: name, Output: output, Compensable: r.intn(2) == 1,
				DurationMillis: int64(r.intn(3)), Usage: pickOf(r, []history.Usage(nil), []history.Usage{{Model: "m", InputTokens: 3, CostUSD: 0.5}}),
				CopiedFromSeq: pickOf(r, 0, 0, 1, int64(position)+2, -1)}
		case history.AttemptFailed:
			failed := history.AttemptFailedData{Error: info}
			if r.intn(2) == 1 {
				failed.NextRunAt = &later
			}
			p = failed
		case history.LeaseExpired:
			p = history.LeaseExpiredData{WorkerID: worker, LeaseEpoch: epoch, NextRunAt: later}
		case history.TaskReleased:
			p = history.TaskReleasedData{WorkerID: worker, LeaseEpoch: epoch, Reason: "shutdown"}
		case history.TaskCompleted:
			p = history.TaskCompletedData{Output: output}
		case history.TaskFailed:
			p = history.TaskFailedData{Error: info, Compensated: positions()}
		case history.TaskDeadLettered:
			p = history.TaskDeadLetteredData{Reason: "budget", Error: info}
		case history.TaskRequeued:
			p = history.TaskRequeuedData{By: by, Reason: "fixed"}
		case history.CancelRequested:
			p = history.CancelRequestedData{By: by}
		case history.CompensationRequested:
			p = history.CompensationRequestedData{By: by}
		case history.CompensationStarted:
			started := history.CompensationStartedData{
				Reason: pickOf(r, history.CompensateCancelled, history.CompensateFailed, history.CompensateRequested, "", "bored"),
				Steps:  positions(),
			}
			if r.intn(2) == 1 {
				started.Error = &info
			}
			p = started
		case history.StepCompensated:
			p = history.StepCompensatedData{Position: next, Name: name}
		case history.CompensationFailed:
			p = history.CompensationFailedData{Position: next, Name: name, Error: info}
		case history.TaskCancelled:
			p = history.TaskCancelledData{Reason: "asked", Compensated: positions()}
		case history.TaskExpired:
			p = history.TaskExpiredData{Reason: "late"}
		case history.TimerStarted:
			p = history.TimerStartedData{Position: timerPos, FireAt: later}
		case history.TimerFired:
			p = history.TimerFiredData{Position: timerPos}
		case history.SignalReceived:
			p = history.SignalReceivedData{Name: signal, Payload: output, Sender: by, DedupID: dedup}
		case history.WaitStarted:
			wait := history.WaitStartedData{Name: signal, Position: receivePos, Deadline: later}
			if r.intn(3) == 0 {
				// A select's wait.
				wait.Name = pickOf(r, "", signal)
				wait.Select = &history.SelectWait{Signals: pickOf(r, []string{signal}, nil, []string{""}), Children: pickOf(r, []int{childPos}, nil, []int{-1})}
			}
			p = wait
		case history.WaitTimedOut:
			p = history.WaitTimedOutData{Name: signal, Position: receivePos}
		case history.ChildStarted:
			p = history.ChildStartedData{Position: childPos, ChildID: childID(childPos), TaskType: pickOf(r, "ocr", ""),
				OnParentClose: pickOf(r, "", history.ParentCloseAbandon, "explode")}
		case history.ChildWaitStarted:
			p = history.ChildWaitStartedData{Positions: pickOf(r, []int{childPos}, nil, []int{0, childPos}), Count: pickOf(r, 0, 1, 2, -1)}
		case history.ChildFinished:
			p = history.ChildFinishedData{Position: childPos, ChildID: childID(childPos), Status: childStatus, Output: output, Error: childErr,
				RunID: pickOf(r, "", "run-2")}
		case history.TaskErased:
			p = history.TaskErasedData{By: by, Reason: "erasure request"}
		case history.PatchRecorded:
			p = history.PatchRecordedData{PatchID: pickOf(r, "add-classify", "", "patch-0", "bad\x00id"), Position: pickOf(r, len(s.Steps), 0, -1),
				CopiedFromSeq: pickOf[int64](r, 0, 0, 0, 1, -1)}
		case history.TaskContinued:
			p = history.TaskContinuedData{NextTaskID: pickOf(r, "run-2", "")}
		case history.TaskForked:
			p = history.TaskForkedData{ForkTaskID: pickOf(r, "fork-1", ""), Position: pickOf(r, 0, position, position-1, -1), By: by}
		case history.SelectMatched:
			m := history.SelectMatchedData{Position: receivePos, Case: pickOf(r, 0, 1, -1, history.MaxSelectCases),
				Kind: pickOf(r, history.SelectSignal, history.SelectChild, history.SelectTimer, history.SelectFuture, "")}
			switch m.Kind {
			case history.SelectSignal:
				m.Name, m.Seq = signal, pickOf(r, s.LastSeq, 1, 0)
				if n := len(s.Signals); n > 0 && r.intn(4) != 0 {
					m.Name, m.Seq = s.Signals[n-1].Name, s.Signals[n-1].Seq
				}
			case history.SelectChild:
				m.Child, m.Seq = childPos, pickOf(r, s.LastSeq, 0)
				if childPos >= 0 && childPos < len(s.Children) && r.intn(4) != 0 {
					m.Seq = s.Children[childPos].FinishedSeq
				}
			case history.SelectFuture:
				m.Step = pickOf(r, position-1, position, 0)
			}
			p = m
		case history.UpdateAccepted:
			p = history.UpdateAcceptedData{UpdateID: pickOf(r, "upd-1", "upd-2", "", "bad\x00id"), Name: pickOf(r, "reassign", ""), Args: output, RequestedBy: by}
		case history.UpdateCompleted:
			done := history.UpdateCompletedData{UpdateID: pickOf(r, "upd-1", "upd-2", "upd-9"), Output: output,
				At: history.UpdatePoint{Call: pickOf(r, 0, 3, -1), Step: len(s.Steps)}}
			if r.intn(2) == 1 {
				done.Error = &info
			}
			p = done
		case history.BudgetReserved:
			p = history.BudgetReservedData{Position: pickOf(r, position, 0, -1), Step: name,
				Budgets: pickOf(r, []history.BudgetWindowRef{{Ref: "namespace"}}, nil, []history.BudgetWindowRef{{Ref: "bogus"}}),
				Tokens:  pickOf[int64](r, 10, 0, -1), CostUSD: pickOf(r, 0.5, 0)}
		case history.BudgetSettled:
			p = history.BudgetSettledData{Position: pickOf(r, position, 0), Step: name,
				Reason:   pickOf(r, history.SettleStepCompleted, history.SettleLeaseExpired, "", "bored"),
				Budgets:  pickOf(r, []history.BudgetWindowRef{{Ref: "task:t-1"}}, nil),
				Reserved: r.intn(2) == 1, Tokens: pickOf[int64](r, 10, 0, -1)}
		case history.BudgetRefused:
			p = history.BudgetRefusedData{Position: position, Step: name, Budget: history.BudgetWindowRef{Ref: pickOf(r, "type:ocr", "", "task:")},
				Action: pickOf(r, history.BudgetFail, history.BudgetWait, "", "shrug"), Deadline: pickOf(r, &later, nil)}
		case history.BudgetRaised:
			p = history.BudgetRaisedData{Budget: history.BudgetWindowRef{Ref: pickOf(r, "type:ocr", "namespace", "")}, By: pickOf(r, by, ""),
				USD: pickOf(r, 1.0, -1.0)}
		case history.StreamClosed:
			p = history.StreamClosedData{Name: pickOf(r, "tokens", ""), Position: pickOf(r, position, -2), Chunks: pickOf[int64](r, 3, -1),
				Outcome: pickOf(r, history.StreamCompleted, "", "bored")}
		case history.ModelLimitWaited:
			p = history.ModelLimitWaitedData{Position: pickOf(r, position, -1), Step: name, Model: pickOf(r, "gpt-4o", ""),
				WaitedMS: pickOf[int64](r, 10, -1)}
		case history.RemoteStepDispatched:
			attempt := 1
			if rs, ok := s.RemoteAt(position); ok {
				attempt = rs.Attempt + 1
			}
			p = history.RemoteStepDispatchedData{Position: position, Name: name, Queue: pickOf(r, "ocr", ""),
				Attempt: pickOf(r, attempt, attempt+1, 0), HeartbeatTimeoutMillis: pickOf[int64](r, 30_000, 0, -1)}
		case history.RemoteStepCompleted, history.RemoteStepFailed:
			rs := history.RemoteStep{Position: position, Name: name, Attempt: 1}
			if len(s.Remote) > 0 {
				rs = s.Remote[r.intn(len(s.Remote))]
			}
			pos, attempt := pickOf(r, rs.Position, position), pickOf(r, rs.Attempt, rs.Attempt+1)
			if history.Types[k] == history.RemoteStepCompleted {
				p = history.RemoteStepCompletedData{Position: pos, Name: pickOf(r, rs.Name, name), Attempt: attempt,
					Worker: pickOf(r, "py-1", ""), Claim: pickOf(r, "c-1", ""), Output: pickOf(r, json.RawMessage(`{"text":"t"}`), nil),
					Streams: pickOf(r, nil, []history.StreamClosedData{{Name: "t", Position: pickOf(r, pos, pos+1), Outcome: pickOf(r, history.StreamCompleted, history.StreamRewound)}})}
			} else {
				p = history.RemoteStepFailedData{Position: pos, Name: pickOf(r, rs.Name, name), Attempt: attempt, Worker: "py-1",
					Error: pickOf(r, info, history.ErrorInfo{})}
			}
		case history.RemoteWaitStarted:
			positions := []int{position}
			if len(s.Remote) > 0 {
				positions = []int{s.Remote[r.intn(len(s.Remote))].Position}
			}
			p = history.RemoteWaitStartedData{Positions: pickOf(r, positions, nil), Count: pickOf(r, 0, 1, 2)}
		default:
			panic("no case for event type " + string(history.Types[k]))
		}
	}
	attempt := s.Attempt
	if _, ok := p.(history.AttemptStartedData); ok {
		attempt++
	}
	attempt = pickOf(r, attempt, attempt-1, attempt+1, 0)
	return history.Event{Seq: seq, At: at, Attempt: attempt, Data: p}
}
