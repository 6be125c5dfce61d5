package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// streamTests: stream entries, kept beside a task's history.
var streamTests = []conformanceTest{
	{"StreamEntriesAreNumberedAndReadInOrder", testStreamAppendRead},
	{"StreamAppendsAreFencedByTheLeaseEpoch", testStreamFenced},
	{"StreamAppendsAreAnnounced", testStreamAnnounced},
	{"StreamOpenChunksAreListedUntilClosed", testStreamOpenList},
	{"StreamEntriesGoWithTheirTaskAndTheirTTL", testStreamRemoved},
	{"StreamAppendsAreChecked", testStreamChecked},
	{"StreamTTLRemovesOldEntriesOfItsNamespace", testStreamTTL},
}

// laterClock is a clock an hour ahead.
type laterClock struct{}

func (laterClock) Now() time.Time { return time.Now().Add(time.Hour) }

func testStreamTTL(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := streamAppend(t, s, ct, chunk("tokens", 0, `"a"`), chunk("tokens", 0, `"b"`), chunk("tokens", 0, `"c"`))
	require.NoError(t, err)
	n, err := maintenance.RemoveExpiredStreams(ctx, s, laterClock{}, 2, 0)
	require.NoError(t, err)
	require.Zero(t, n, "a namespace without a stream TTL keeps its entries")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: store.DefaultNamespace, StreamTTL: 2 * time.Hour}))
	n, err = maintenance.RemoveExpiredStreams(ctx, s, laterClock{}, 2, 0)
	require.NoError(t, err)
	require.Zero(t, n, "younger than the TTL")
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: store.DefaultNamespace, StreamTTL: 30 * time.Minute}))
	n, err = maintenance.RemoveExpiredStreams(ctx, s, laterClock{}, 2, 0)
	require.NoError(t, err)
	require.Equal(t, 3, n, "older than the TTL, in batches")
	require.Empty(t, readStream(t, s, id, 0, 0))
}

// streamAppend writes entries for ct's attempt.
func streamAppend(t *testing.T, s store.Executor, ct *store.ClaimedTask, entries ...store.StreamWrite) (int64, error) {
	t.Helper()
	for i := range entries {
		if entries[i].Attempt == 0 {
			entries[i].Attempt = ct.State.Attempt
		}
	}
	return s.StreamAppend(testContext(t), &store.StreamAppendParams{Namespace: store.DefaultNamespace, TaskID: ct.Task.ID,
		Epoch: ct.Task.LeaseEpoch, Entries: entries})
}

func chunk(stream string, position int, data string) store.StreamWrite {
	return store.StreamWrite{Stream: stream, Position: position, Kind: store.StreamChunk, Data: []byte(data)}
}

func readStream(t *testing.T, s store.Executor, id uuid.UUID, after int64, limit int) []store.StreamEntry {
	t.Helper()
	got, err := s.StreamRead(testContext(t), &store.StreamReadParams{Namespace: store.DefaultNamespace, TaskID: id, After: after, Limit: limit})
	require.NoError(t, err)
	return got
}

func testStreamAppendRead(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	last, err := streamAppend(t, s, ct, chunk("tokens", 0, `"Hel"`), chunk("tokens", 0, `"lo"`), chunk("progress", -1, `{"done":1}`))
	require.NoError(t, err)
	require.EqualValues(t, 3, last)
	last, err = streamAppend(t, s, ct, chunk("tokens", 0, `"!"`), store.StreamWrite{Stream: "tokens", Position: 0, Kind: store.StreamEnd})
	require.NoError(t, err)
	require.EqualValues(t, 5, last, "numbered after the last")

	all := readStream(t, s, id, 0, 0)
	require.Len(t, all, 5)
	for i, e := range all {
		require.EqualValues(t, i+1, e.Seq)
		require.Equal(t, 1, e.Attempt)
		require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)
	}
	require.Equal(t, `"Hel"`, string(all[0].Data))
	require.Equal(t, "progress", all[2].Stream)
	require.Equal(t, -1, all[2].Position)
	require.Equal(t, store.StreamEnd, all[4].Kind)
	require.Nil(t, all[4].Data)

	page := readStream(t, s, id, 2, 2)
	require.Equal(t, []int64{3, 4}, []int64{page[0].Seq, page[1].Seq}, "a page after a seq")
	require.Empty(t, readStream(t, s, id, 5, 0), "past the last")
	other, err := s.StreamRead(testContext(t), &store.StreamReadParams{Namespace: "other", TaskID: id})
	require.NoError(t, err)
	require.Empty(t, other, "another namespace's reader sees nothing")
	_, err = s.StreamRead(testContext(t), &store.StreamReadParams{Namespace: store.DefaultNamespace, TaskID: id, Limit: store.MaxStreamPage + 1})
	require.Error(t, err, "a page is bounded")
}

func testStreamFenced(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	first := claimOne(t, s, "crashed", shortTTL)
	_, err := streamAppend(t, s, first, chunk("tokens", 0, `"a"`))
	require.NoError(t, err)
	time.Sleep(shortTTL)
	rescueOne(t, s)
	_, err = streamAppend(t, s, first, chunk("tokens", 0, `"b"`))
	requireIs(t, err, store.ErrFenced, "a rescued attempt's lease has ended")

	second := claimWhenDue(t, s, claimParams("w2", 1, time.Minute))
	require.Equal(t, id, second.Task.ID)
	_, err = streamAppend(t, s, first, chunk("tokens", 0, `"c"`))
	requireIs(t, err, store.ErrFenced, "a stale epoch")
	last, err := streamAppend(t, s, second, chunk("tokens", 0, `"d"`))
	require.NoError(t, err)
	require.EqualValues(t, 2, last)
	complete(t, s, second)
	_, err = streamAppend(t, s, second, chunk("tokens", 0, `"e"`))
	requireIs(t, err, store.ErrFenced, "a finished task")
	got := readStream(t, s, id, 0, 0)
	require.Len(t, got, 2)
	require.Equal(t, []int{1, 2}, []int{got[0].Attempt, got[1].Attempt})
}

func testStreamAnnounced(t *testing.T, s store.Store) {
	ctx := testContext(t)
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	defer func() { _ = l.Close(ctx) }()
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := streamAppend(t, s, ct, chunk("tokens", 0, `"a"`))
	require.NoError(t, err)
	for {
		n, err := l.WaitForNotification(ctx)
		require.NoError(t, err)
		if len(n.Streams) > 0 {
			require.Equal(t, []uuid.UUID{id}, n.Streams)
			return
		}
	}
}

func testStreamOpenList(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{MaxAttempts: 3})
	first := claimOne(t, s, "w", time.Minute)
	_, err := streamAppend(t, s, first, chunk("tokens", 0, `"a"`), chunk("tokens", 1, `"b"`), chunk("log", 1, `"c"`),
		store.StreamWrite{Stream: "tokens", Position: 0, Kind: store.StreamEnd})
	require.NoError(t, err)
	_, err = appendFenced(t, s, first, history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Transient, Message: "x"}, NextRunAt: new(time.Now())})
	require.NoError(t, err)
	second := claimWhenDue(t, s, claimParams("w", 1, time.Minute))
	open, err := s.StreamOpenList(ctx, &store.StreamOpenListParams{Namespace: store.DefaultNamespace, TaskID: id, Before: second.State.Attempt})
	require.NoError(t, err)
	require.Equal(t, []store.StreamOpen{{Stream: "log", Attempt: 1, Position: 1}, {Stream: "tokens", Attempt: 1, Position: 1}}, open,
		"an ended stream is closed")
	_, err = streamAppend(t, s, second, store.StreamWrite{Stream: "tokens", Attempt: 1, Position: 1, Kind: store.StreamRewind},
		chunk("tokens", 1, `"b2"`))
	require.NoError(t, err)
	open, err = s.StreamOpenList(ctx, &store.StreamOpenListParams{Namespace: store.DefaultNamespace, TaskID: id, Before: second.State.Attempt})
	require.NoError(t, err)
	require.Equal(t, []store.StreamOpen{{Stream: "log", Attempt: 1, Position: 1}}, open, "a rewound stream is closed; the new attempt's is not listed")
}

func testStreamRemoved(t *testing.T, s store.Store) {
	ctx := testContext(t)
	done := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	_, err := streamAppend(t, s, ct, chunk("tokens", 0, `"a"`), chunk("tokens", 0, `"b"`))
	require.NoError(t, err)
	complete(t, s, ct)
	kept := start(t, s, spec{})
	ct = claimOne(t, s, "w", time.Minute)
	_, err = streamAppend(t, s, ct, chunk("tokens", 0, `"c"`))
	require.NoError(t, err)

	// The TTL removes what is older than it, in its namespace only.
	n, err := s.StreamRemoveExpired(ctx, &store.StreamRemoveExpiredParams{Namespace: "other", Before: time.Now().Add(time.Hour), Max: 10})
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.StreamRemoveExpired(ctx, &store.StreamRemoveExpiredParams{Namespace: store.DefaultNamespace, Before: time.Now().Add(-time.Hour), Max: 10})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is older than an hour")
	n, err = s.StreamRemoveExpired(ctx, &store.StreamRemoveExpiredParams{Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Hour), Max: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n, "bounded by Max, oldest first")
	require.Len(t, readStream(t, s, done, 0, 0), 1)

	// Retention removes a task's entries with it.
	res, err := maintenance.RemoveFinished(ctx, s, &store.RemoveFinishedParams{Namespace: store.DefaultNamespace, Before: time.Now().Add(time.Minute), Max: 10})
	require.NoError(t, err)
	require.Equal(t, 1, res.Tasks)
	require.Empty(t, readStream(t, s, done, 0, 0))
	require.Len(t, readStream(t, s, kept, 0, 0), 1)

	// An erasure's removal.
	n, err = s.StreamRemove(ctx, &store.StreamRemoveParams{Namespace: store.DefaultNamespace, TaskID: kept})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, readStream(t, s, kept, 0, 0))

	// A namespace's stream TTL is one of its settings.
	require.NoError(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "streamy", StreamTTL: 90 * time.Minute}))
	got, err := s.NamespaceList(ctx, &store.NamespaceListParams{Namespace: "streamy"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 90*time.Minute, got[0].StreamTTL)
	require.Error(t, s.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "streamy", StreamTTL: -time.Second}))
}

func testStreamChecked(t *testing.T, s store.Store) {
	start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	for name, entries := range map[string][]store.StreamWrite{
		"no entries":       nil,
		"a bad name":       {chunk("a b", 0, `"x"`)},
		"a bad kind":       {{Stream: "s", Position: 0, Kind: "nope", Data: []byte(`"x"`)}},
		"no data":          {{Stream: "s", Position: 0, Kind: store.StreamChunk}},
		"a position":       {chunk("s", -2, `"x"`)},
		"too large":        {chunk("s", 0, string(make([]byte, 257<<10)))},
		"too many at once": make([]store.StreamWrite, store.MaxStreamAppend+1),
	} {
		_, err := streamAppend(t, s, ct, entries...)
		require.Error(t, err, name)
	}
	require.Empty(t, readStream(t, s, ct.Task.ID, 0, 0), "nothing written")
}
