package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// appendTests: appends fenced by lease epoch and log position.
var appendTests = []conformanceTest{
	{"FencedAppendCompletesTheTask", testFencedAppendCompletes},
	{"AppendWithStaleEpochIsFenced", testAppendStaleEpochIsFenced},
	{"AppendWithStaleSeqConflicts", testAppendStaleSeqConflicts},
	{"AppendOfInvalidSequenceWritesNothing", testAppendInvalidWritesNothing},
	{"AppendToUnknownTaskIsNotFound", testAppendUnknownTaskNotFound},
	{"AppendFailureThenTerminalFailsTheTask", testAppendFailureThenTerminal},
	{"AppendRetryReschedules", testAppendRetryReschedules},
	{"EventAppendManyJudgesEachAppendAlone", testEventAppendManyEachAlone},
	{"EventAppendManyNamingATaskTwiceJudgesEachInTurn", testEventAppendManyNamesATaskTwice},
	{"PatchMarkerIsAppendedFencedOnce", testPatchMarker},
}

func stepPayload(pos int) history.StepCompletedData {
	return history.StepCompletedData{Position: pos, Name: "step", Output: json.RawMessage(`{"pos": 1}`)}
}

// requireUnchanged checks that a refused append wrote nothing: the task's
// log and row are still at lastSeq.
func requireUnchanged(t *testing.T, s store.Store, id uuid.UUID, lastSeq int64) {
	t.Helper()
	require.Equal(t, lastSeq, getTask(t, s, id).LastSeq, "the row did not move")
	require.Len(t, events(t, s, id), int(lastSeq), "nothing was appended")
}

func testFencedAppendCompletes(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	ct := claimOne(t, s, "w", time.Minute)
	at := time.Now().UTC().Truncate(time.Microsecond)
	st, err := s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: 1, At: at,
		Payloads: []history.Payload{stepPayload(0), stepPayload(1)},
	})
	require.NoError(t, err)
	require.Equal(t, int64(4), st.LastSeq, "the new state is returned")
	require.Len(t, st.Steps, 2)
	require.Equal(t, history.StatusRunning, st.Status)

	evs := events(t, s, id)
	require.Len(t, evs, 4)
	for _, ev := range evs[2:] {
		require.Equal(t, history.StepCompleted, ev.Type())
		require.Equal(t, 1, ev.Attempt)
		require.WithinDuration(t, at, ev.At, time.Microsecond, "the events carry At")
	}
	replayed := stateOf(t, s, id)
	require.Len(t, replayed.Steps, 2)
	require.JSONEq(t, `{"pos": 1}`, string(replayed.Steps[1].Output))

	next := *ct
	next.State = st
	done, err := appendFenced(t, s, &next, history.TaskCompletedData{Output: json.RawMessage(`{"answer": 42}`)})
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, done.Status)

	task := getTask(t, s, id)
	require.Equal(t, history.StatusCompleted, task.Status)
	require.JSONEq(t, `{"answer": 42}`, string(task.Output))
	require.Equal(t, int64(5), task.LastSeq)
	require.NotNil(t, task.FinishedAt)
	require.Empty(t, task.LeaseOwner, "a finished task holds no lease")
	require.Nil(t, task.LeaseExpiresAt)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted,
		history.StepCompleted, history.TaskCompleted}, eventTypes(t, s, id))
	require.Equal(t, 1, requireReplayMatches(t, s))
}

func testAppendStaleEpochIsFenced(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	for _, epoch := range []int64{ct.State.Lease.Epoch - 1, ct.State.Lease.Epoch + 1} {
		_, err := s.EventAppend(testContext(t), &store.EventAppendParams{
			TaskID: id, State: ct.State, Epoch: epoch, Attempt: 1, Payloads: []history.Payload{stepPayload(0)},
		})
		requireIs(t, err, store.ErrFenced, "epoch %d, the task is at %d", epoch, ct.State.Lease.Epoch)
		require.False(t, errors.Is(err, store.ErrConflict), "fenced, not a conflict: %v", err)
	}
	requireUnchanged(t, s, id, 2)
	// The lease holder is not disturbed by the refused writes.
	complete(t, s, ct)
}

func testAppendStaleSeqConflicts(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := appendFenced(t, s, ct, stepPayload(0))
	require.NoError(t, err)
	// Same epoch, but the log moved on past ct.State.
	_, err = appendFenced(t, s, ct, stepPayload(0))
	requireIs(t, err, store.ErrConflict)
	require.False(t, errors.Is(err, store.ErrFenced), "a conflict, not fenced: %v", err)
	// Unfenced appends are checked by seq alone.
	_, err = s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: id, State: ct.State, Attempt: 1, Payloads: []history.Payload{stepPayload(0)},
	})
	requireIs(t, err, store.ErrConflict)
	requireUnchanged(t, s, id, 3)
}

func testAppendInvalidWritesNothing(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	before := events(t, s, id)
	for name, payloads := range map[string][]history.Payload{
		"position repeated":   {stepPayload(1), stepPayload(1)},
		"second start":        {history.AttemptStartedData{WorkerID: "x", LeaseEpoch: ct.State.Lease.Epoch + 1}},
		"valid then invalid":  {stepPayload(0), stepPayload(0)},
		"wrong release epoch": {history.TaskReleasedData{WorkerID: "w", LeaseEpoch: ct.State.Lease.Epoch + 99}},
		"after terminal":      {history.TaskCompletedData{}, stepPayload(0)},
		"requeue of running":  {history.TaskRequeuedData{By: "ops"}},
	} {
		_, err := appendFenced(t, s, ct, payloads...)
		requireIs(t, err, history.ErrInvalidHistory, name)
	}
	_, err := s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: 2, Payloads: []history.Payload{stepPayload(0)},
	})
	requireIs(t, err, history.ErrInvalidHistory, "events of another attempt")
	_, err = appendFenced(t, s, ct)
	require.Error(t, err, "no events")
	_, err = appendFenced(t, s, ct, history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Permanent, Message: "x"}})
	require.Error(t, err, "an attempt that ends with neither a retry nor a terminal event")

	requireUnchanged(t, s, id, 2)
	require.Equal(t, before, events(t, s, id), "the history is as it was")
	require.Equal(t, history.StatusRunning, getTask(t, s, id).Status)
	complete(t, s, ct) // the state the refused appends started from is still current
}

func testAppendUnknownTaskNotFound(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	for _, epoch := range []int64{0, ct.State.Lease.Epoch} {
		_, err := s.EventAppend(testContext(t), &store.EventAppendParams{
			TaskID: uuid.New(), State: ct.State, Epoch: epoch, Attempt: 1, Payloads: []history.Payload{stepPayload(0)},
		})
		requireIs(t, err, store.ErrNotFound, "epoch %d", epoch)
	}
	requireUnchanged(t, s, id, 2)
}

func testAppendFailureThenTerminal(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	ct := claimOne(t, s, "w", time.Minute)
	info := history.ErrorInfo{Class: history.Permanent, Message: "bad input", Kind: "validation", Status: 422,
		Attrs: map[string]string{"field": "x"}, Step: "parse", Position: 0}
	st, err := appendFenced(t, s, ct, history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info})
	require.NoError(t, err)
	require.Equal(t, history.StatusFailed, st.Status)
	task := getTask(t, s, id)
	require.Equal(t, history.StatusFailed, task.Status)
	require.Equal(t, &info, task.LastError, "the evidence is kept")
	require.NotNil(t, task.FinishedAt)
	require.Nil(t, task.LeaseExpiresAt)
	require.Empty(t, task.LeaseOwner)
	require.Empty(t, claim(t, s, claimParams("w", 10, time.Minute)), "a failed task is not claimed")
}

func testAppendRetryReschedules(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	ct := claimOne(t, s, "w", time.Minute)
	// A backoff from the wall clock carries nanoseconds; the row must still
	// agree with the replay of the log.
	next := time.Now().Add(time.Hour).Truncate(time.Second).Add(123456789 * time.Nanosecond)
	_, err := appendFenced(t, s, ct, history.AttemptFailedData{
		Error: history.ErrorInfo{Class: history.Transient, Message: "timeout"}, NextRunAt: &next,
	})
	require.NoError(t, err)
	task := getTask(t, s, id)
	require.Equal(t, history.StatusRetrying, task.Status)
	require.WithinDuration(t, next, task.RunAt, time.Microsecond)
	require.Empty(t, task.LeaseOwner)
	require.Nil(t, task.LeaseExpiresAt)
	require.Empty(t, claim(t, s, claimParams("w", 1, time.Minute)), "not due before its next run time")

	// A retry due now is claimed as the next attempt.
	id2 := start(t, s, spec{MaxAttempts: 3})
	ct2 := claimOne(t, s, "w", time.Minute)
	require.Equal(t, id2, ct2.Task.ID)
	now := time.Now()
	_, err = appendFenced(t, s, ct2, history.AttemptFailedData{
		Error: history.ErrorInfo{Class: history.Transient, Message: "blip"}, NextRunAt: &now,
	})
	require.NoError(t, err)
	again := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, id2, again.Task.ID)
	require.Equal(t, 2, again.Task.Attempt)
	require.Greater(t, again.Task.LeaseEpoch, ct2.Task.LeaseEpoch)
	require.NotNil(t, again.Task.LastError, "the retry's claim keeps the failure")
	require.Equal(t, *getTask(t, s, id2), *again.Task, "the claim returns the row as written")
	complete(t, s, again)
}

func testEventAppendManyEachAlone(t *testing.T, s store.Store) {
	a := start(t, s, spec{})
	b := start(t, s, spec{})
	claimed := claim(t, s, claimParams("w", 2, time.Minute))
	require.Len(t, claimed, 2)
	byID := map[uuid.UUID]*store.ClaimedTask{}
	for _, ct := range claimed {
		byID[ct.Task.ID] = ct
	}
	ca, cb := byID[a], byID[b]
	require.NotNil(t, ca)
	require.NotNil(t, cb)

	res, err := s.EventAppendMany(testContext(t), []*store.EventAppendParams{
		{TaskID: a, State: ca.State, Epoch: ca.State.Lease.Epoch, Attempt: 1,
			Payloads: []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`"a"`)}}},
		{TaskID: b, State: cb.State, Epoch: cb.State.Lease.Epoch + 1, Attempt: 1,
			Payloads: []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`"b"`)}}},
	})
	require.NoError(t, err)
	require.Len(t, res, 2, "one result per append, in order")
	require.NoError(t, res[0].Err)
	require.Equal(t, history.StatusCompleted, res[0].State.Status)
	requireIs(t, res[1].Err, store.ErrFenced)
	require.Equal(t, cb.State.LastSeq, res[1].State.LastSeq, "a refused append returns the old state")

	require.Equal(t, history.StatusCompleted, getTask(t, s, a).Status)
	require.JSONEq(t, `"a"`, string(getTask(t, s, a).Output))
	requireUnchanged(t, s, b, 2)
	require.Equal(t, history.StatusRunning, getTask(t, s, b).Status)
}

// reclaimed claims a fresh task for owner, hands it back and claims it
// again: the attempt a failover leaves behind. It returns the first
// (stale) claim and the second (current) one.
func reclaimed(t *testing.T, s store.Store, owner string) (stale, current *store.ClaimedTask) {
	t.Helper()
	id := start(t, s, spec{})
	stale = claimOne(t, s, owner, time.Minute)
	require.Equal(t, id, stale.Task.ID)
	_, err := appendFenced(t, s, stale, history.TaskReleasedData{WorkerID: owner, LeaseEpoch: stale.State.Lease.Epoch})
	require.NoError(t, err)
	current = claimWhenDue(t, s, claimParams(owner, 1, time.Minute))
	require.Equal(t, id, current.Task.ID)
	require.Greater(t, current.State.Lease.Epoch, stale.State.Lease.Epoch)
	return stale, current
}

// testEventAppendManyNamesATaskTwice: a batch may name a task more than
// once (a stale attempt's outcome queued beside the new attempt's append,
// after a failover lost the first lease). Its appends are judged one after
// another in the batch's order, each against the task as the appends
// before it left it: a stale one is fenced whichever comes first, of two
// appends at the same seq the first is written and the second conflicts,
// an append that follows the one before it is written too, and the other
// tasks' appends are written as if the task were named once.
func testEventAppendManyNamesATaskTwice(t *testing.T, s store.Store) {
	xStale, x := reclaimed(t, s, "w")
	vStale, v := reclaimed(t, s, "w")
	start(t, s, spec{})
	y := claimOne(t, s, "w", time.Minute)
	start(t, s, spec{})
	z := claimOne(t, s, "w", time.Minute)
	a, b := start(t, s, spec{}), start(t, s, spec{})
	claimed := claim(t, s, claimParams("w", 2, time.Minute))
	require.Len(t, claimed, 2)
	require.Equal(t, map[uuid.UUID]bool{a: true, b: true}, claimedIDs(claimed))

	step := func(ct *store.ClaimedTask, state history.State, pos int, output string) *store.EventAppendParams {
		return &store.EventAppendParams{TaskID: ct.Task.ID, State: state, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
			Payloads: []history.Payload{history.StepCompletedData{Position: pos, Name: "step", Output: json.RawMessage(output)}}}
	}
	done := func(ct *store.ClaimedTask) *store.EventAppendParams {
		return &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
			Payloads: []history.Payload{history.TaskCompletedData{Output: completedOutput}}}
	}
	// z's second append follows its first.
	zAfter, err := history.Apply(z.State, history.Event{Seq: z.State.LastSeq + 1, At: time.Now(), Attempt: z.State.Attempt, Data: stepPayload(0)})
	require.NoError(t, err)
	ps := []*store.EventAppendParams{
		done(claimed[0]),
		step(xStale, xStale.State, 0, `"stale"`),
		step(y, y.State, 0, `"first"`),
		step(x, x.State, 0, `"x"`),
		step(v, v.State, 0, `"v"`),
		step(y, y.State, 0, `"second"`),
		step(z, z.State, 0, `{"pos": 1}`),
		step(z, zAfter, 1, `"z"`),
		step(vStale, vStale.State, 0, `"stale"`),
		done(claimed[1]),
	}
	res, err := s.EventAppendMany(testContext(t), ps)
	require.NoError(t, err, "a batch naming a task twice is judged append by append")
	require.Len(t, res, len(ps))

	for _, i := range []int{0, 9} {
		require.NoError(t, res[i].Err, "another task's append %d", i)
		require.Equal(t, history.StatusCompleted, res[i].State.Status)
		require.Equal(t, history.StatusCompleted, getTask(t, s, ps[i].TaskID).Status)
	}
	for _, i := range []int{1, 8} {
		requireIs(t, res[i].Err, store.ErrFenced, "the stale attempt's append %d", i)
		require.Equal(t, ps[i].State.LastSeq, res[i].State.LastSeq, "a refused append returns the old state")
	}
	for _, i := range []int{2, 3, 4, 6, 7} {
		require.NoError(t, res[i].Err, "append %d", i)
		require.Equal(t, ps[i].State.LastSeq+1, res[i].State.LastSeq)
	}
	requireIs(t, res[5].Err, store.ErrConflict, "the second append at y's seq")
	require.Equal(t, y.State.LastSeq, res[5].State.LastSeq)

	// What each task's log holds: the current attempt's step after the
	// hand-back, not the stale one; y's first step; both of z's.
	for _, c := range []struct {
		ct     *store.ClaimedTask
		output string
		steps  int
	}{{x, `"x"`, 1}, {v, `"v"`, 1}, {y, `"first"`, 1}, {z, `"z"`, 2}} {
		task := getTask(t, s, c.ct.Task.ID)
		require.Equal(t, history.StatusRunning, task.Status)
		require.Equal(t, c.ct.State.LastSeq+int64(c.steps), task.LastSeq)
		evs := events(t, s, c.ct.Task.ID)
		require.Len(t, evs, int(task.LastSeq))
		last := evs[len(evs)-1].Data.(history.StepCompletedData)
		require.JSONEq(t, c.output, string(last.Output))
		require.Equal(t, c.ct.State.Attempt, evs[len(evs)-1].Attempt)
	}
	require.Equal(t, 6, requireReplayMatches(t, s))
}

// testPatchMarker: a patch marker (workflow.Patched) is an attempt's
// write, fenced by its lease like a step: appended with the step before
// it, read back in the task's state; a second marker of its id, an
// invalid id, or a stale epoch is refused, writing nothing.
func testPatchMarker(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	marker := history.PatchRecordedData{PatchID: "add-classify", Position: 1}
	_, err := s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch + 1, Attempt: 1, Payloads: []history.Payload{marker},
	})
	requireIs(t, err, store.ErrFenced)
	requireUnchanged(t, s, id, 2)

	st, err := appendFenced(t, s, ct, stepPayload(0), marker)
	require.NoError(t, err)
	require.Equal(t, []history.Patch{{ID: "add-classify", Position: 1}}, st.Patches)
	require.Equal(t, []history.Patch{{ID: "add-classify", Position: 1}}, stateOf(t, s, id).Patches)
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.PatchRecorded},
		eventTypes(t, s, id))

	next := *ct
	next.State = st
	for name, p := range map[string]history.PatchRecordedData{
		"recorded twice": marker,
		"no id":          {Position: 1},
		"id too long":    {PatchID: strings.Repeat("p", history.MaxPatchIDBytes+1), Position: 1},
		"control char":   {PatchID: "a\tb", Position: 1},
	} {
		_, err := appendFenced(t, s, &next, p)
		requireIs(t, err, history.ErrInvalidHistory, name)
	}
	requireUnchanged(t, s, id, 4)
	complete(t, s, &next)
	require.Equal(t, 1, requireReplayMatches(t, s))
}
