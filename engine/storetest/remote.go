package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// remoteTests: the rows workers outside the process claim
// (store.RemoteStep*), claimed, fenced, handed back and swept alike by
// every store.
var remoteTests = []conformanceTest{
	{"RemoteStepClaimHeartbeatTake", testRemoteStepClaimHeartbeatTake},
	{"RemoteStepFencedByNonce", testRemoteStepFencedByNonce},
	{"RemoteStepReleaseAndExpiry", testRemoteStepReleaseAndExpiry},
	{"RemoteStepFinishedTasks", testRemoteStepFinishedTasks},
	{"RemoteStepNotifies", testRemoteStepNotifies},
	{"RemoteStepRefusesBadInput", testRemoteStepRefusesBadInput},
	{"RemoteStreamAppendAndClose", testRemoteStreamAppendAndClose},
	{"RemoteStreamWritersRace", testRemoteStreamWritersRace},
}

func remoteRow(task uuid.UUID, pos int, name string) store.RemoteStep {
	return store.RemoteStep{Namespace: store.DefaultNamespace, TaskID: task, Position: pos, Name: name, Queue: "ocr", Attempt: 1,
		Input: []byte(`{"page":` + string(rune('0'+pos%10)) + `}`), HeartbeatTimeout: time.Minute}
}

func insertRemote(t *testing.T, s store.Executor, rows ...store.RemoteStep) {
	t.Helper()
	require.NoError(t, s.RemoteStepInsert(testContext(t), &store.RemoteStepInsertParams{Steps: rows}))
}

func claimRemote(t *testing.T, s store.Executor, worker string, max int, names ...string) []*store.RemoteStep {
	t.Helper()
	got, err := s.RemoteStepClaim(testContext(t), &store.RemoteStepClaimParams{Namespace: store.DefaultNamespace, Queue: "ocr",
		Names: names, Max: max, Worker: worker})
	require.NoError(t, err)
	return got
}

func refOf(r *store.RemoteStep) *store.RemoteStepRef {
	return &store.RemoteStepRef{Namespace: r.Namespace, TaskID: r.TaskID, Position: r.Position, Nonce: r.Nonce}
}

func testRemoteStepClaimHeartbeatTake(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{})
	first := remoteRow(task, 1, "ocr.page")
	first.StartToClose = 5 * time.Minute
	insertRemote(t, s, first, remoteRow(task, 2, "ocr.page"), remoteRow(task, 3, "embed"))
	// Another queue's and namespace's steps are not this claim's.
	other := remoteRow(task, 4, "ocr.page")
	other.Queue = "gpu"
	insertRemote(t, s, other)

	got := claimRemote(t, s, "py-1", 2, "ocr.page")
	require.Len(t, got, 2)
	require.Equal(t, []int{1, 2}, []int{got[0].Position, got[1].Position}, "oldest dispatch first, then by position")
	c := got[0]
	require.Equal(t, task, c.TaskID)
	require.Equal(t, "ocr.page", c.Name)
	require.Equal(t, "ocr", c.Queue)
	require.Equal(t, 1, c.Attempt)
	require.Equal(t, []byte(`{"page":1}`), c.Input)
	require.Equal(t, time.Minute, c.HeartbeatTimeout)
	require.Equal(t, 5*time.Minute, c.StartToClose)
	require.Equal(t, "py-1", c.Worker)
	require.NotEmpty(t, c.Nonce)
	require.NotEqual(t, c.Nonce, got[1].Nonce, "each claimed step has a nonce of its own")
	require.WithinDuration(t, c.ClaimedAt.Add(time.Minute), c.LeaseExpiresAt, time.Millisecond, "the lease is the heartbeat timeout")
	require.False(t, c.CancelRequested)

	require.Empty(t, claimRemote(t, s, "py-2", 5, "ocr.page"), "claimed steps are not claimed again")
	rest := claimRemote(t, s, "py-2", 5)
	require.Len(t, rest, 1, "without names, any step of the queue")
	require.Equal(t, "embed", rest[0].Name)
	_, err := s.RemoteStepClaim(ctx, &store.RemoteStepClaimParams{Namespace: "elsewhere", Queue: "ocr", Max: 5, Worker: "w"})
	require.NoError(t, err)

	renewal, err := s.RemoteStepHeartbeat(ctx, refOf(c))
	require.NoError(t, err)
	require.False(t, renewal.CancelRequested)
	require.False(t, renewal.LeaseExpiresAt.Before(c.LeaseExpiresAt), "a heartbeat moves the lease on")

	taken, err := s.RemoteStepTake(ctx, refOf(c))
	require.NoError(t, err)
	require.Equal(t, c.Nonce, taken.Nonce)
	require.Equal(t, []byte(`{"page":1}`), taken.Input)
	_, err = s.RemoteStepTake(ctx, refOf(c))
	requireIs(t, err, store.ErrNotFound, "a step is taken once")
	_, err = s.RemoteStepHeartbeat(ctx, refOf(c))
	requireIs(t, err, store.ErrNotFound, "a taken step has no lease to extend")

	// Taken in a transaction rolled back: the claim still holds it.
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.RemoteStepTake(ctx, refOf(got[1]))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = s.RemoteStepHeartbeat(ctx, refOf(got[1]))
	require.NoError(t, err)

	// The task's cancel reaches the claim's heartbeat, and no new claim
	// takes its steps.
	insertRemote(t, s, remoteRow(task, 7, "ocr.page"))
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: task, State: stateOf(t, s, task),
		Payloads: []history.Payload{history.CancelRequestedData{By: "test"}}})
	require.NoError(t, err)
	renewal, err = s.RemoteStepHeartbeat(ctx, refOf(got[1]))
	require.NoError(t, err)
	require.True(t, renewal.CancelRequested)
	require.Empty(t, claimRemote(t, s, "py-3", 5))
}

func testRemoteStepFencedByNonce(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{})
	insertRemote(t, s, remoteRow(task, 0, "ocr.page"))
	c := claimRemote(t, s, "py-1", 1)[0]
	for name, ref := range map[string]*store.RemoteStepRef{
		"another nonce":     {Namespace: c.Namespace, TaskID: task, Position: 0, Nonce: "not-" + c.Nonce},
		"another position":  {Namespace: c.Namespace, TaskID: task, Position: 1, Nonce: c.Nonce},
		"another namespace": {Namespace: "elsewhere", TaskID: task, Position: 0, Nonce: c.Nonce},
		"another queue's":   {Namespace: c.Namespace, TaskID: task, Position: 0, Nonce: c.Nonce, Queues: []string{"gpu"}},
	} {
		_, err := s.RemoteStepHeartbeat(ctx, ref)
		requireIs(t, err, store.ErrNotFound, name)
		_, err = s.RemoteStepTake(ctx, ref)
		requireIs(t, err, store.ErrNotFound, name)
		requireIs(t, s.RemoteStepRelease(ctx, ref), store.ErrNotFound, name)
	}
	// The right queue among others: found.
	_, err := s.RemoteStepHeartbeat(ctx, &store.RemoteStepRef{Namespace: c.Namespace, TaskID: task, Position: 0, Nonce: c.Nonce, Queues: []string{"gpu", "ocr"}})
	require.NoError(t, err)
	// Not expired: the rescuer's take leaves it.
	expired := refOf(c)
	expired.Expired = true
	_, err = s.RemoteStepTake(ctx, expired)
	requireIs(t, err, store.ErrNotFound, "a claim whose lease runs is not the rescuer's")
	_, err = s.RemoteStepTake(ctx, refOf(c))
	require.NoError(t, err)
}

func testRemoteStepReleaseAndExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{})
	row := remoteRow(task, 0, "ocr.page")
	row.HeartbeatTimeout = store.MinRemoteHeartbeat
	insertRemote(t, s, row)
	c := claimRemote(t, s, "py-1", 1)[0]
	require.NoError(t, s.RemoteStepRelease(ctx, refOf(c)))
	requireIs(t, s.RemoteStepRelease(ctx, refOf(c)), store.ErrNotFound, "released once")
	again := claimRemote(t, s, "py-2", 1)
	require.Len(t, again, 1, "a released step is claimable at once")
	require.NotEqual(t, c.Nonce, again[0].Nonce, "under a new nonce")
	require.Equal(t, 1, again[0].Attempt, "a release is not an attempt")
	_, err := s.RemoteStepHeartbeat(ctx, refOf(c))
	requireIs(t, err, store.ErrNotFound, "the released claim is fenced")

	none, err := s.RemoteStepListExpired(ctx, &store.RemoteStepExpiredParams{Max: 10})
	require.NoError(t, err)
	require.Empty(t, none)
	var expired []*store.RemoteStep
	waitFor(t, "the claim's lease to end", func() bool {
		expired, err = s.RemoteStepListExpired(ctx, &store.RemoteStepExpiredParams{Max: 10})
		require.NoError(t, err)
		return len(expired) == 1
	})
	require.Equal(t, again[0].Nonce, expired[0].Nonce)
	require.Equal(t, "py-2", expired[0].Worker)
	require.Empty(t, claimRemote(t, s, "py-3", 1), "an expired claim is the rescuer's, not a new claim's")
	ref := refOf(expired[0])
	ref.Expired = true
	taken, err := s.RemoteStepTake(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "py-2", taken.Worker)
}

func testRemoteStepFinishedTasks(t *testing.T, s store.Store) {
	ctx := testContext(t)
	done := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	live := start(t, s, spec{})
	insertRemote(t, s, remoteRow(done, 0, "ocr.page"), remoteRow(live, 0, "ocr.page"), remoteRow(uuid.New(), 0, "ocr.page"))
	got := claimRemote(t, s, "py-1", 10)
	require.Len(t, got, 1, "only a step of a task not finished is claimed")
	require.Equal(t, live, got[0].TaskID)
	gone, err := s.RemoteStepRemoveFinished(ctx, &store.RemoteStepExpiredParams{Max: 10})
	require.NoError(t, err)
	require.Len(t, gone, 2, "the rows of the finished task and of a task gone")
	require.ElementsMatch(t, []bool{true, false}, []bool{gone[0].TaskID == done, gone[1].TaskID == done})
	require.Equal(t, store.DefaultNamespace, gone[0].Namespace)
	_, err = s.RemoteStepHeartbeat(ctx, refOf(got[0]))
	require.NoError(t, err, "a live task's step stays")
}

func testRemoteStepNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{})
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })

	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.RemoteStepInsert(ctx, &store.RemoteStepInsertParams{Steps: []store.RemoteStep{remoteRow(task, 9, "x")}}))
	require.NoError(t, tx.Rollback(ctx))

	insertRemote(t, s, remoteRow(task, 0, "ocr.page"))
	awaitRemoteNote(t, l)
	c := claimRemote(t, s, "py-1", 1)[0]
	require.NoError(t, s.RemoteStepRelease(ctx, refOf(c)))
	awaitRemoteNote(t, l)
}

// awaitRemoteNote waits for the announcement of the default namespace's
// queue ocr.
func awaitRemoteNote(t *testing.T, l store.Listener) {
	t.Helper()
	for {
		note, err := l.WaitForNotification(testContext(t)) // the test's deadline ends a wait for nothing
		require.NoError(t, err)
		if len(note.Remote) > 0 {
			require.Equal(t, []string{store.RemoteQueueKey(store.DefaultNamespace, "ocr")}, note.Remote)
			return
		}
	}
}

func testRemoteStepRefusesBadInput(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := uuid.New()
	for name, mutate := range map[string]func(r *store.RemoteStep){
		"no task":              func(r *store.RemoteStep) { r.TaskID = uuid.Nil },
		"no namespace":         func(r *store.RemoteStep) { r.Namespace = "" },
		"no name":              func(r *store.RemoteStep) { r.Name = "" },
		"no queue":             func(r *store.RemoteStep) { r.Queue = "" },
		"attempt 0":            func(r *store.RemoteStep) { r.Attempt = 0 },
		"negative position":    func(r *store.RemoteStep) { r.Position = -1 },
		"short heartbeat":      func(r *store.RemoteStep) { r.HeartbeatTimeout = time.Millisecond },
		"long heartbeat":       func(r *store.RemoteStep) { r.HeartbeatTimeout = store.MaxRemoteHeartbeat + time.Second },
		"name with NUL":        func(r *store.RemoteStep) { r.Name = "a\x00b" },
		"input over the bound": func(r *store.RemoteStep) { r.Input = make([]byte, store.MaxRemoteInputBytes+1) },
	} {
		r := remoteRow(task, 0, "ocr.page")
		mutate(&r)
		require.Error(t, s.RemoteStepInsert(ctx, &store.RemoteStepInsertParams{Steps: []store.RemoteStep{r}}), name)
	}
	require.Error(t, s.RemoteStepInsert(ctx, &store.RemoteStepInsertParams{}), "no steps")
	for name, p := range map[string]*store.RemoteStepClaimParams{
		"max 0":     {Namespace: "default", Queue: "ocr", Max: 0, Worker: "w"},
		"max 101":   {Namespace: "default", Queue: "ocr", Max: store.MaxRemoteClaim + 1, Worker: "w"},
		"no worker": {Namespace: "default", Queue: "ocr", Max: 1},
		"no queue":  {Namespace: "default", Max: 1, Worker: "w"},
		"bad name":  {Namespace: "default", Queue: "ocr", Max: 1, Worker: "w", Names: []string{""}},
	} {
		_, err := s.RemoteStepClaim(ctx, p)
		require.Error(t, err, name)
	}
	_, err := s.RemoteStepHeartbeat(ctx, &store.RemoteStepRef{Namespace: "default", TaskID: task})
	require.Error(t, err, "a reference without a nonce")
	require.NotErrorIs(t, err, store.ErrNotFound, "refused as invalid, not as not held")
}

func chunks(stream string, datas ...string) []store.RemoteChunk {
	out := make([]store.RemoteChunk, len(datas))
	for i, d := range datas {
		out[i] = store.RemoteChunk{Stream: stream, Data: []byte(d)}
	}
	return out
}

func appendRemote(s store.Executor, ref *store.RemoteStepRef, bytes int64, cs ...store.RemoteChunk) (int64, error) {
	return s.RemoteStreamAppend(context.Background(), &store.RemoteStreamAppendParams{Ref: *ref, Chunks: cs, Bytes: bytes})
}

func testRemoteStreamAppendAndClose(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{})
	second := remoteRow(task, 2, "ocr.page")
	second.Attempt = 3
	insertRemote(t, s, remoteRow(task, 1, "ocr.page"), second)
	got := claimRemote(t, s, "py-1", 2)
	require.Len(t, got, 2)
	one, two := refOf(got[0]), refOf(got[1])

	last, err := appendRemote(s, one, 10, chunks("tokens", `"He"`, `"llo"`)...)
	require.NoError(t, err)
	require.EqualValues(t, 2, last)
	last, err = appendRemote(s, two, 5, append(chunks("progress", `{"p":1}`), chunks("tokens", `"x"`)...)...)
	require.NoError(t, err)
	require.EqualValues(t, 4, last, "one numbering over the task's streams")
	_, err = appendRemote(s, one, 1, chunks("progress", `1`)...)
	require.NoError(t, err)

	all := readStream(t, s, task, 0, 0)
	require.Len(t, all, 5)
	require.Equal(t, store.StreamEntry{Seq: 3, Stream: "progress", Attempt: 3, Position: 2, Kind: store.StreamChunk, Data: []byte(`{"p":1}`),
		CreatedAt: all[2].CreatedAt}, all[2], "at the step's position, under its attempt")
	byStep, err := s.StreamRead(ctx, &store.StreamReadParams{Namespace: store.DefaultNamespace, TaskID: task,
		Step: &store.StreamStep{Position: 1, Attempt: 1}})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 5}, seqsOf(byStep), "a step's entries alone")

	// Fenced by the claim and its queues; bounded over the claim's chunks.
	stale := *one
	stale.Nonce = "not-the-claim"
	_, err = appendRemote(s, &stale, 1, chunks("tokens", `"z"`)...)
	require.ErrorIs(t, err, store.ErrNotFound)
	otherQueue := *one
	otherQueue.Queues = []string{"gpu"}
	_, err = appendRemote(s, &otherQueue, 1, chunks("tokens", `"z"`)...)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = appendRemote(s, one, store.MaxRemoteStreamBytes-11, chunks("tokens", `"to the brim"`)...)
	require.NoError(t, err)
	_, err = appendRemote(s, one, 1, chunks("tokens", `"over"`)...)
	require.ErrorIs(t, err, store.ErrStreamFull)
	require.Len(t, readStream(t, s, task, 0, 0), 6, "a refused append writes nothing")

	// The outcome's transaction closes what the step's attempt left open.
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	row, err := tx.RemoteStepTake(ctx, one)
	require.NoError(t, err)
	n, err := tx.RemoteStreamClose(ctx, &store.RemoteStreamCloseParams{Namespace: store.DefaultNamespace, TaskID: task,
		Position: row.Position, Kind: store.StreamEnd})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, tx.Commit(ctx))
	all = readStream(t, s, task, 0, 0)
	require.Len(t, all, 8)
	require.Equal(t, []string{"tokens", "progress"}, []string{all[6].Stream, all[7].Stream}, "in the order first written")
	for _, e := range all[6:] {
		require.Equal(t, store.StreamEnd, e.Kind)
		require.Equal(t, [2]int{1, 1}, [2]int{e.Position, e.Attempt})
		require.Nil(t, e.Data)
	}
	n, err = s.RemoteStreamClose(ctx, &store.RemoteStreamCloseParams{Namespace: store.DefaultNamespace, TaskID: task,
		Position: 1, Kind: store.StreamEnd})
	require.NoError(t, err)
	require.Zero(t, n, "closed streams are not closed again")
	_, err = appendRemote(s, one, 1, chunks("tokens", `"late"`)...)
	require.ErrorIs(t, err, store.ErrNotFound, "the outcome took the claim")

	// A release rewinds, and the next claim starts its count again.
	require.NoError(t, s.RemoteStepRelease(ctx, two))
	n, err = s.RemoteStreamClose(ctx, &store.RemoteStreamCloseParams{Namespace: store.DefaultNamespace, TaskID: task,
		Position: 2, Kind: store.StreamRewind})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	again := claimRemote(t, s, "py-2", 1)
	require.Len(t, again, 1)
	_, err = appendRemote(s, refOf(again[0]), store.MaxRemoteStreamBytes, chunks("tokens", `"anew"`)...)
	require.NoError(t, err)
	n, err = s.RemoteStreamClose(ctx, &store.RemoteStreamCloseParams{Namespace: store.DefaultNamespace, TaskID: task,
		Position: 2, Kind: store.StreamEnd})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the stream written again after its rewind is open")
	all = readStream(t, s, task, 0, 0)
	require.Equal(t, store.StreamEntry{Seq: all[len(all)-1].Seq, Stream: "tokens", Attempt: 3, Position: 2, Kind: store.StreamEnd,
		CreatedAt: all[len(all)-1].CreatedAt}, all[len(all)-1], "closed under the attempt that wrote it")

	// At most history.MaxStreams streams a claim (this one has written
	// its bytes' bound already: these count none); chunks of those it has
	// still go.
	var names []store.RemoteChunk
	for i := range history.MaxStreams - 1 {
		names = append(names, store.RemoteChunk{Stream: fmt.Sprintf("s%d", i), Data: []byte("1")})
	}
	_, err = appendRemote(s, refOf(again[0]), 0, names...)
	require.NoError(t, err)
	_, err = appendRemote(s, refOf(again[0]), 0, chunks("one-too-many", "1")...)
	require.ErrorIs(t, err, store.ErrStreamFull)
	_, err = appendRemote(s, refOf(again[0]), 0, chunks("s7", "2")...)
	require.NoError(t, err)
	// A finished task's claims write nothing more.
	complete(t, s, claimOne(t, s, "w", time.Minute))
	_, err = appendRemote(s, refOf(again[0]), 0, chunks("tokens", `"after"`)...)
	require.ErrorIs(t, err, store.ErrNotFound)

	for _, bad := range []*store.RemoteStreamAppendParams{
		{Ref: *refOf(again[0])},
		{Ref: *refOf(again[0]), Chunks: chunks("t", "1"), Bytes: -1},
		{Ref: store.RemoteStepRef{Namespace: store.DefaultNamespace, TaskID: task, Position: 2}, Chunks: chunks("t", "1")},
	} {
		_, err := s.RemoteStreamAppend(ctx, bad)
		require.Error(t, err)
	}
	for _, bad := range []*store.RemoteStreamCloseParams{
		{Namespace: store.DefaultNamespace, TaskID: task, Position: 2, Kind: store.StreamChunk},
		{Namespace: store.DefaultNamespace, TaskID: task, Position: -1, Kind: store.StreamEnd},
		{TaskID: task, Position: 2, Kind: store.StreamEnd},
	} {
		_, err := s.RemoteStreamClose(ctx, bad)
		require.Error(t, err)
	}
}

func seqsOf(es []store.StreamEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// testRemoteStreamWritersRace: the claims of a fan-out write one task's
// streams at once; every chunk is written once, numbered without a gap.
func testRemoteStreamWritersRace(t *testing.T, s store.Store) {
	task := start(t, s, spec{})
	const steps, each = 4, 25
	for p := range steps {
		insertRemote(t, s, remoteRow(task, p, "ocr.page"))
	}
	got := claimRemote(t, s, "py-1", steps)
	require.Len(t, got, steps)
	errs := make(chan error, steps)
	for _, r := range got {
		go func() {
			for i := range each {
				if _, err := appendRemote(s, refOf(r), 1, chunks("tokens", `"`+string(rune('a'+i%26))+`"`)...); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range steps {
		require.NoError(t, <-errs)
	}
	all := readStream(t, s, task, 0, 0)
	require.Len(t, all, steps*each)
	perStep := map[int]int{}
	for i, e := range all {
		require.EqualValues(t, i+1, e.Seq)
		perStep[e.Position]++
	}
	for p := range steps {
		require.Equal(t, each, perStep[p])
	}
}
