package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

// inquiryTests: a client's question for a worker with a task's code
// (store.Inquiry*), taken, answered and removed alike by every store.
var inquiryTests = []conformanceTest{
	{"InquiryAskTakeAnswer", testInquiryAskTakeAnswer},
	{"InquiryHeldUntilLeaseEnds", testInquiryHeldUntilLeaseEnds},
	{"InquiryPastDeadlineAndRemoval", testInquiryPastDeadlineAndRemoval},
	{"InquiryNotifies", testInquiryNotifies},
	{"InquiryRefusesBadInput", testInquiryRefusesBadInput},
}

func inquiryParams(task uuid.UUID, typ string, version int, kind string) *store.InquiryCreateParams {
	return &store.InquiryCreateParams{ID: uuid.New(), Namespace: store.DefaultNamespace, TaskID: task, TaskType: typ, TaskVersion: version,
		Kind: kind, Name: "progress", Args: []byte(`{"detail":true}`), Timeout: time.Minute}
}

func takeInquiries(t *testing.T, s store.Executor, owner string, kinds []string, types ...store.TypeKey) []*store.Inquiry {
	t.Helper()
	got, err := s.InquiryTake(testContext(t), &store.InquiryTakeParams{Namespace: store.DefaultNamespace, Types: types, Kinds: kinds,
		Owner: owner, Max: 10, Lease: time.Minute})
	require.NoError(t, err)
	return got
}

func inquiryIDs(ins []*store.Inquiry) []uuid.UUID {
	out := make([]uuid.UUID, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

func testInquiryAskTakeAnswer(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{Type: "doc", Version: 1})
	doc := store.TypeKey{Type: "doc", Version: 1}
	q := inquiryParams(task, "doc", 1, store.InquiryQuery)
	require.NoError(t, s.InquiryCreate(ctx, q))
	u := inquiryParams(task, "doc", 1, store.InquiryUpdate)
	u.Args = nil
	require.NoError(t, s.InquiryCreate(ctx, u))
	other := inquiryParams(task, "doc", 2, store.InquiryQuery)
	require.NoError(t, s.InquiryCreate(ctx, other))
	requireIs(t, s.InquiryCreate(ctx, q), store.ErrConflict, "an inquiry's id is taken once")

	got, err := s.InquiryGet(ctx, &store.InquiryGetParams{ID: q.ID, Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, store.InquiryPending, got.State)
	require.Equal(t, task, got.TaskID)
	require.Equal(t, "doc", got.TaskType)
	require.Equal(t, 1, got.TaskVersion)
	require.Equal(t, store.InquiryQuery, got.Kind)
	require.Equal(t, "progress", got.Name)
	require.Equal(t, []byte(`{"detail":true}`), got.Args)
	require.Nil(t, got.Answer)
	require.True(t, got.AnsweredAt.IsZero())
	require.True(t, got.TakenUntil.IsZero())
	require.WithinDuration(t, got.CreatedAt.Add(time.Minute), got.Deadline, time.Millisecond, "the deadline is the timeout from now")
	_, err = s.InquiryGet(ctx, &store.InquiryGetParams{ID: q.ID, Namespace: "elsewhere"})
	requireIs(t, err, store.ErrNotFound, "another namespace's inquiry is not found")

	// A take gets the kinds and types asked for, oldest first; a second
	// take finds them held.
	require.Empty(t, takeInquiries(t, s, "w0", nil, store.TypeKey{Type: "mail", Version: 1}))
	queries := takeInquiries(t, s, "w1", []string{store.InquiryQuery}, doc)
	require.Equal(t, []uuid.UUID{q.ID}, inquiryIDs(queries))
	require.Equal(t, "w1", queries[0].TakenBy)
	require.False(t, queries[0].TakenUntil.IsZero())
	require.Equal(t, []byte(`{"detail":true}`), queries[0].Args)
	all := takeInquiries(t, s, "w2", nil, doc, store.TypeKey{Type: "doc", Version: 2})
	require.ElementsMatch(t, []uuid.UUID{u.ID, other.ID}, inquiryIDs(all))
	require.Nil(t, all[slices.IndexFunc(all, func(in *store.Inquiry) bool { return in.ID == u.ID })].Args)
	require.Empty(t, takeInquiries(t, s, "w3", nil, doc, store.TypeKey{Type: "doc", Version: 2}), "every inquiry is held")

	// Answered once: with an answer, or an error.
	require.NoError(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: q.ID, Namespace: store.DefaultNamespace, Owner: "w1",
		Answer: []byte(`"half way"`)}))
	requireIs(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: q.ID, Namespace: store.DefaultNamespace, Owner: "w9",
		Answer: []byte(`"again"`)}), store.ErrNotFound, "an answered inquiry is not answered again")
	requireIs(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: uuid.New(), Namespace: store.DefaultNamespace, Owner: "w1"}),
		store.ErrNotFound, "an unknown inquiry")
	require.NoError(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: u.ID, Namespace: store.DefaultNamespace, Owner: "w2",
		ErrorCode: "query_not_found", Error: `the workflow registered no query "progress"`}))
	got, err = s.InquiryGet(ctx, &store.InquiryGetParams{ID: q.ID, Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, store.InquiryAnswered, got.State)
	require.Equal(t, []byte(`"half way"`), got.Answer)
	require.Equal(t, "w1", got.AnsweredBy)
	require.Empty(t, got.ErrorCode)
	require.False(t, got.AnsweredAt.IsZero())
	got, err = s.InquiryGet(ctx, &store.InquiryGetParams{ID: u.ID, Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Equal(t, store.InquiryAnswered, got.State)
	require.Nil(t, got.Answer)
	require.Equal(t, "query_not_found", got.ErrorCode)
	require.Contains(t, got.Error, "progress")
}

// testInquiryHeldUntilLeaseEnds: a worker that took an inquiry and died
// leaves it to another once its hold ends.
func testInquiryHeldUntilLeaseEnds(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{Type: "doc", Version: 1})
	q := inquiryParams(task, "doc", 1, store.InquiryQuery)
	require.NoError(t, s.InquiryCreate(ctx, q))
	doc := []store.TypeKey{{Type: "doc", Version: 1}}
	got, err := s.InquiryTake(ctx, &store.InquiryTakeParams{Namespace: store.DefaultNamespace, Types: doc, Owner: "dies", Max: 1,
		Lease: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, got, 1)
	waitFor(t, "the hold of a dead worker's take to end", func() bool {
		return len(takeInquiries(t, s, "lives", nil, doc...)) == 1
	})
	require.NoError(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: q.ID, Namespace: store.DefaultNamespace, Owner: "lives",
		Answer: []byte(`1`)}))
}

func testInquiryPastDeadlineAndRemoval(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{Type: "doc", Version: 1})
	doc := store.TypeKey{Type: "doc", Version: 1}
	late := inquiryParams(task, "doc", 1, store.InquiryQuery)
	late.Timeout = time.Millisecond
	require.NoError(t, s.InquiryCreate(ctx, late))
	answered := inquiryParams(task, "doc", 1, store.InquiryQuery)
	require.NoError(t, s.InquiryCreate(ctx, answered))
	waiting := inquiryParams(task, "doc", 1, store.InquiryQuery)
	waiting.Timeout = store.MaxInquiryTimeout
	require.NoError(t, s.InquiryCreate(ctx, waiting))
	waitFor(t, "an inquiry past its deadline to be taken no more", func() bool {
		got := takeInquiries(t, s, "w", nil, doc)
		return !slices.Contains(inquiryIDs(got), late.ID)
	})
	require.NoError(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: answered.ID, Namespace: store.DefaultNamespace, Owner: "w",
		Answer: []byte(`1`)}))

	// Kept for a while: nothing goes.
	n, err := s.InquiryRemoveExpired(ctx, &store.InquiryRemoveExpiredParams{Keep: time.Hour, Max: 100})
	require.NoError(t, err)
	require.Zero(t, n)
	// Kept no longer: the answered one and the one past its deadline go,
	// one at a time; the pending one stays.
	removed := 0
	waitFor(t, "answered and late inquiries to be removed", func() bool {
		n, err := s.InquiryRemoveExpired(ctx, &store.InquiryRemoveExpiredParams{Max: 1})
		require.NoError(t, err)
		require.LessOrEqual(t, n, 1)
		removed += n
		return removed == 2
	})
	for _, id := range []uuid.UUID{late.ID, answered.ID} {
		_, err := s.InquiryGet(ctx, &store.InquiryGetParams{ID: id, Namespace: store.DefaultNamespace})
		requireIs(t, err, store.ErrNotFound)
	}
	_, err = s.InquiryGet(ctx, &store.InquiryGetParams{ID: waiting.ID, Namespace: store.DefaultNamespace})
	require.NoError(t, err)
}

// testInquiryNotifies: workers hear of an inquiry made, its asker of its
// answer, after the commit.
func testInquiryNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := start(t, s, spec{Type: "doc", Version: 1})
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	q := inquiryParams(task, "doc", 1, store.InquiryQuery)

	// In a transaction rolled back: nothing is heard.
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.InquiryCreate(ctx, inquiryParams(task, "doc", 1, store.InquiryQuery)))
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, s.InquiryCreate(ctx, q))
	for {
		note, err := l.WaitForNotification(ctx) // the test's deadline ends a wait for nothing
		require.NoError(t, err)
		if note.Inquiries {
			break
		}
	}
	require.NoError(t, s.InquiryAnswer(ctx, &store.InquiryAnswerParams{ID: q.ID, Namespace: store.DefaultNamespace, Owner: "w",
		Answer: []byte(`1`)}))
	for {
		note, err := l.WaitForNotification(ctx)
		require.NoError(t, err)
		if len(note.Answered) > 0 {
			require.Equal(t, []uuid.UUID{q.ID}, note.Answered)
			return
		}
	}
}

func testInquiryRefusesBadInput(t *testing.T, s store.Store) {
	ctx := testContext(t)
	task := uuid.New()
	for name, mutate := range map[string]func(p *store.InquiryCreateParams){
		"no id":        func(p *store.InquiryCreateParams) { p.ID = uuid.Nil },
		"no task":      func(p *store.InquiryCreateParams) { p.TaskID = uuid.Nil },
		"no namespace": func(p *store.InquiryCreateParams) { p.Namespace = "" },
		"no type":      func(p *store.InquiryCreateParams) { p.TaskType = "" },
		"version 0":    func(p *store.InquiryCreateParams) { p.TaskVersion = 0 },
		"kind":         func(p *store.InquiryCreateParams) { p.Kind = "signal" },
		"no name":      func(p *store.InquiryCreateParams) { p.Name = "" },
		"long name":    func(p *store.InquiryCreateParams) { p.Name = strings.Repeat("n", store.MaxInquiryNameBytes+1) },
		"NUL name":     func(p *store.InquiryCreateParams) { p.Name = "a\x00b" },
		"large args":   func(p *store.InquiryCreateParams) { p.Args = make([]byte, store.MaxInquiryPayloadBytes+1) },
		"no timeout":   func(p *store.InquiryCreateParams) { p.Timeout = 0 },
		"long timeout": func(p *store.InquiryCreateParams) { p.Timeout = store.MaxInquiryTimeout + time.Second },
	} {
		p := inquiryParams(task, "doc", 1, store.InquiryQuery)
		mutate(p)
		require.Error(t, s.InquiryCreate(ctx, p), name)
	}
	require.Error(t, s.InquiryCreate(ctx, nil))
	doc := []store.TypeKey{{Type: "doc", Version: 1}}
	for name, p := range map[string]*store.InquiryTakeParams{
		"no owner":   {Namespace: "default", Types: doc, Max: 1, Lease: time.Second},
		"no types":   {Namespace: "default", Owner: "w", Max: 1, Lease: time.Second},
		"max 0":      {Namespace: "default", Types: doc, Owner: "w", Lease: time.Second},
		"max":        {Namespace: "default", Types: doc, Owner: "w", Max: store.MaxInquiryTake + 1, Lease: time.Second},
		"no lease":   {Namespace: "default", Types: doc, Owner: "w", Max: 1},
		"bad kind":   {Namespace: "default", Types: doc, Owner: "w", Max: 1, Lease: time.Second, Kinds: []string{"x"}},
		"many types": {Namespace: "default", Types: make([]store.TypeKey, store.MaxInquiryTypes+1), Owner: "w", Max: 1, Lease: time.Second},
	} {
		_, err := s.InquiryTake(ctx, p)
		require.Error(t, err, name)
	}
	id := uuid.New()
	for name, p := range map[string]*store.InquiryAnswerParams{
		"no owner":      {ID: id, Namespace: "default"},
		"large answer":  {ID: id, Namespace: "default", Owner: "w", Answer: make([]byte, store.MaxInquiryPayloadBytes+1)},
		"error no code": {ID: id, Namespace: "default", Owner: "w", Error: "x"},
		"NUL error":     {ID: id, Namespace: "default", Owner: "w", ErrorCode: "x", Error: "a\x00"},
		"long error":    {ID: id, Namespace: "default", Owner: "w", ErrorCode: "x", Error: strings.Repeat("e", store.MaxInquiryErrorBytes+1)},
	} {
		require.Error(t, s.InquiryAnswer(ctx, p), name)
	}
	_, err := s.InquiryGet(ctx, &store.InquiryGetParams{Namespace: "default"})
	require.Error(t, err)
	for _, p := range []*store.InquiryRemoveExpiredParams{{Max: 0}, {Max: store.MaxInquiryRemove + 1}, {Keep: -1, Max: 1}} {
		_, err := s.InquiryRemoveExpired(ctx, p)
		require.Error(t, err, "%+v", p)
	}
}
