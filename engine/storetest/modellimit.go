package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

// modelLimitTests: model rate limits (store.ModelLimit*, ModelAdmit and
// the rest): the sliding window's arithmetic, turns across fairness keys,
// settlement, dead workers' tickets, alike in every store. Asks carry
// their time (ModelAdmitParams.Now), so the window is exact.
var modelLimitTests = []conformanceTest{
	{"ModelLimitSetListDelete", testModelLimitSetListDelete},
	{"ModelAdmitExactWindow", testModelAdmitExactWindow},
	{"ModelAdmitCountsAdmissionsStampedAhead", testModelAdmitSkew},
	{"ModelAdmitRequestsAndLargeAsk", testModelAdmitRequestsAndLargeAsk},
	{"ModelSettleFreesTokens", testModelSettleFreesTokens},
	{"ModelTurnsRoundRobin", testModelTurnsRoundRobin},
	{"ModelDeadWorkersTicket", testModelDeadWorkersTicket},
	{"ModelDropAndRemoveOld", testModelDropAndRemoveOld},
	{"ModelNotifies", testModelNotifies},
	{"ModelRefusesBadInput", testModelRefusesBadInput},
}

// modelAsker asks for admissions of one model at given times.
type modelAsker struct {
	t     *testing.T
	s     store.Executor
	model string
	t0    time.Time
}

func newModelAsker(t *testing.T, s store.Executor, tpm, rpm int64) *modelAsker {
	t.Helper()
	model := "gpt-test"
	require.NoError(t, s.ModelLimitSet(testContext(t), &store.ModelLimitSetParams{Namespace: store.DefaultNamespace, Model: model,
		TokensPerMinute: tpm, RequestsPerMinute: rpm}))
	// An hour ago, to the second: the asks' times are exact and apart
	// from the store's clock.
	return &modelAsker{t: t, s: s, model: model, t0: time.Now().Add(-time.Hour).UTC().Truncate(time.Second)}
}

// ticket is one step's ask: its id and key.
type ticket struct {
	id  uuid.UUID
	key string
}

func newTicket(key string) ticket { return ticket{id: uuid.New(), key: key} }

func (m *modelAsker) ask(tk ticket, tokens int64, at time.Duration) store.ModelAdmission {
	m.t.Helper()
	got, err := m.s.ModelAdmit(testContext(m.t), m.params(tk, tokens, at))
	require.NoError(m.t, err)
	require.True(m.t, got.Limited)
	return got
}

func (m *modelAsker) params(tk ticket, tokens int64, at time.Duration) *store.ModelAdmitParams {
	return &store.ModelAdmitParams{Namespace: store.DefaultNamespace, Model: m.model, Ticket: tk.id, TaskID: uuid.New(), Position: 1,
		FairnessKey: tk.key, Owner: "worker-1", Tokens: tokens, TicketTTL: store.MaxModelTicketTTL, Now: m.t0.Add(at)}
}

func testModelLimitSetListDelete(t *testing.T, s store.Store) {
	ctx := testContext(t)
	list := func(ns string) []store.ModelLimit {
		t.Helper()
		got, err := s.ModelLimitList(ctx, &store.ModelLimitListParams{Namespace: ns})
		require.NoError(t, err)
		return got
	}
	require.Empty(t, list(store.DefaultNamespace))
	for _, p := range []store.ModelLimitSetParams{
		{Namespace: store.DefaultNamespace, Model: "gpt-4o", TokensPerMinute: 20_000, RequestsPerMinute: 500},
		{Namespace: store.DefaultNamespace, Model: "claude", TokensPerMinute: 1000},
		{Namespace: "other", Model: "gpt-4o", RequestsPerMinute: 3},
		{Namespace: store.DefaultNamespace, Model: "gpt-4o", TokensPerMinute: 30_000}, // replaces
	} {
		require.NoError(t, s.ModelLimitSet(ctx, &p))
	}
	got := list(store.DefaultNamespace)
	require.Len(t, got, 2)
	require.Equal(t, "claude", got[0].Model)
	require.Equal(t, int64(1000), got[0].TokensPerMinute)
	require.Equal(t, "gpt-4o", got[1].Model)
	require.Equal(t, int64(30_000), got[1].TokensPerMinute)
	require.Zero(t, got[1].RequestsPerMinute, "a set replaces both rates")
	require.False(t, got[1].UpdatedAt.IsZero())
	require.Equal(t, time.UTC, got[1].UpdatedAt.Location())

	// A deleted limit admits every step, and writes nothing.
	require.NoError(t, s.ModelLimitDelete(ctx, &store.ModelLimitDeleteParams{Namespace: store.DefaultNamespace, Model: "gpt-4o"}))
	requireIs(t, s.ModelLimitDelete(ctx, &store.ModelLimitDeleteParams{Namespace: store.DefaultNamespace, Model: "gpt-4o"}), store.ErrNotFound)
	require.Len(t, list(store.DefaultNamespace), 1)
	require.Len(t, list("other"), 1)
	adm, err := s.ModelAdmit(ctx, &store.ModelAdmitParams{Namespace: store.DefaultNamespace, Model: "gpt-4o", Ticket: uuid.New(),
		TaskID: uuid.New(), Owner: "w", Tokens: store.MaxModelTokensPerMinute, TicketTTL: time.Minute})
	require.NoError(t, err)
	require.False(t, adm.Limited)
	require.False(t, adm.Admitted)

	// A namespace holds MaxModelLimits; a replace still goes at the bound.
	for i := 1; i < store.MaxModelLimits; i++ {
		require.NoError(t, s.ModelLimitSet(ctx, &store.ModelLimitSetParams{Namespace: "full", Model: fmt.Sprintf("m%04d", i), RequestsPerMinute: 1}))
	}
	require.NoError(t, s.ModelLimitSet(ctx, &store.ModelLimitSetParams{Namespace: "full", Model: "last", RequestsPerMinute: 1}))
	err = s.ModelLimitSet(ctx, &store.ModelLimitSetParams{Namespace: "full", Model: "one-more", RequestsPerMinute: 1})
	require.ErrorContains(t, err, "model limits already")
	requireIs(t, err, store.ErrConflict)
	require.NoError(t, s.ModelLimitSet(ctx, &store.ModelLimitSetParams{Namespace: "full", Model: "last", RequestsPerMinute: 2}))
}

func testModelAdmitExactWindow(t *testing.T, s store.Store) {
	m := newModelAsker(t, s, 1000, 0)
	a, b, c := newTicket("k"), newTicket("k"), newTicket("k")
	require.True(t, m.ask(a, 400, 0).Admitted)
	got := m.ask(b, 400, 10*time.Second)
	require.True(t, got.Admitted)
	require.Equal(t, int64(400), got.UsedTokens)
	require.Equal(t, int64(1), got.UsedRequests)

	// 800 in the window: 300 more waits until a's 400 slides out, at
	// exactly t0+60s (an admission at t counts in the window (now-60s, now]).
	got = m.ask(c, 300, 20*time.Second)
	require.False(t, got.Admitted)
	require.Zero(t, got.Ahead)
	require.Equal(t, int64(800), got.UsedTokens)
	require.Equal(t, m.t0.Add(store.ModelLimitWindow), got.RetryAt)
	got = m.ask(c, 300, store.ModelLimitWindow-time.Microsecond)
	require.False(t, got.Admitted, "a's tokens still count a microsecond before its minute is up")
	got = m.ask(c, 300, store.ModelLimitWindow)
	require.True(t, got.Admitted, "at its minute a's tokens are out of the window")
	require.Equal(t, int64(400), got.UsedTokens)

	// 700 now (b 400, c 300); an ask of 700 fits once b and c are out.
	d := newTicket("k")
	got = m.ask(d, 700, store.ModelLimitWindow+time.Second)
	require.False(t, got.Admitted)
	require.Equal(t, m.t0.Add(10*time.Second+store.ModelLimitWindow), got.RetryAt, "b's exit leaves 300: 300+700 fits")
}

// A worker whose clock runs behind another's still counts what the other
// admitted (stamped ahead of its own now): clock skew does not let it
// admit past the limit.
func testModelAdmitSkew(t *testing.T, s store.Store) {
	m := newModelAsker(t, s, 100, 0)
	require.True(t, m.ask(newTicket("a"), 100, 2*time.Second).Admitted, "a worker 2 s ahead")
	got := m.ask(newTicket("b"), 100, 0)
	require.False(t, got.Admitted, "the worker behind sees it")
	require.Equal(t, int64(100), got.UsedTokens)
}

func testModelAdmitRequestsAndLargeAsk(t *testing.T, s store.Store) {
	m := newModelAsker(t, s, 1000, 2)
	require.True(t, m.ask(newTicket(""), 10, 0).Admitted)
	require.True(t, m.ask(newTicket(""), 10, time.Second).Admitted)
	third := newTicket("")
	got := m.ask(third, 10, 2*time.Second)
	require.False(t, got.Admitted, "two requests a minute")
	require.Equal(t, m.t0.Add(store.ModelLimitWindow), got.RetryAt)
	require.True(t, m.ask(third, 10, store.ModelLimitWindow).Admitted)

	// An ask over the whole limit goes alone, in an empty window.
	big := newTicket("")
	got = m.ask(big, 5000, store.ModelLimitWindow+time.Second)
	require.False(t, got.Admitted)
	require.Equal(t, m.t0.Add(store.ModelLimitWindow+store.ModelLimitWindow), got.RetryAt, "when the window empties")
	require.True(t, m.ask(big, 5000, 2*store.ModelLimitWindow).Admitted)
}

func testModelSettleFreesTokens(t *testing.T, s store.Store) {
	ctx := testContext(t)
	m := newModelAsker(t, s, 1000, 0)
	a, b := newTicket(""), newTicket("")
	require.True(t, m.ask(a, 800, 0).Admitted)
	require.False(t, m.ask(b, 400, time.Second).Admitted)
	settle := func(id uuid.UUID, tokens int64) error {
		return s.ModelSettle(ctx, &store.ModelSettleParams{Namespace: store.DefaultNamespace, Admission: id, Tokens: tokens})
	}
	require.NoError(t, settle(a.id, 500))
	requireIs(t, settle(a.id, 100), store.ErrNotFound, "an admission settles once")
	requireIs(t, settle(uuid.New(), 100), store.ErrNotFound)
	got := m.ask(b, 400, 2*time.Second)
	require.True(t, got.Admitted, "a spent 500 of its 800: 400 more fit")
	require.Equal(t, int64(500), got.UsedTokens)

	// Settling above the reservation counts in full.
	require.NoError(t, settle(b.id, 600))
	got = m.ask(newTicket(""), 1, 3*time.Second)
	require.False(t, got.Admitted)
	require.Equal(t, int64(1100), got.UsedTokens)
}

func testModelTurnsRoundRobin(t *testing.T, s store.Store) {
	// One request a minute: each minute admits the ticket first in turn.
	m := newModelAsker(t, s, 0, 1)
	require.True(t, m.ask(newTicket("a"), 0, 0).Admitted)
	a1, a2, a3, b1, c1 := newTicket("a"), newTicket("a"), newTicket("a"), newTicket("b"), newTicket("c")
	waiting := []ticket{a1, a2, a3, b1, c1}
	for i, tk := range waiting {
		got := m.ask(tk, 0, time.Duration(i+1)*time.Second)
		require.False(t, got.Admitted)
	}
	// Tenant a's three came first; b and c still go before a's second.
	want := []ticket{a1, b1, c1, a2, a3}
	ahead := map[uuid.UUID]int{a1.id: 0, b1.id: 1, c1.id: 2, a2.id: 3, a3.id: 4}
	for _, tk := range waiting {
		require.Equal(t, ahead[tk.id], m.ask(tk, 0, 10*time.Second).Ahead)
	}
	for minute, next := range want {
		at := time.Duration(minute+1) * store.ModelLimitWindow
		// Everyone asks, the first in turn last: only it goes.
		for _, tk := range waiting {
			if tk != next {
				require.False(t, m.ask(tk, 0, at).Admitted, "minute %d: %s before its turn", minute+1, tk.key)
			}
		}
		require.True(t, m.ask(next, 0, at).Admitted, "minute %d: %s's turn", minute+1, next.key)
		waiting = removeTicket(waiting, next)
	}

	// A key that comes late takes turns from the round served last: it
	// does not get all the rounds it missed in a burst.
	w := store.ModelLimitWindow
	var as []ticket
	for i := range 4 {
		as = append(as, newTicket("a"))
		require.False(t, m.ask(as[i], 0, 5*w+time.Duration(i+1)*time.Second).Admitted)
	}
	require.True(t, m.ask(as[0], 0, 6*w).Admitted)
	require.True(t, m.ask(as[1], 0, 7*w).Admitted)
	z1, z2 := newTicket("z"), newTicket("z")
	require.Zero(t, m.ask(z1, 0, 7*w+time.Second).Ahead)
	require.Equal(t, 2, m.ask(z2, 0, 7*w+2*time.Second).Ahead, "z's second waits behind a's third")
}

func removeTicket(ts []ticket, gone ticket) []ticket {
	var out []ticket
	for _, t := range ts {
		if t != gone {
			out = append(out, t)
		}
	}
	return out
}

func testModelDeadWorkersTicket(t *testing.T, s store.Store) {
	m := newModelAsker(t, s, 0, 1)
	require.True(t, m.ask(newTicket(""), 0, 0).Admitted)
	dead, alive := newTicket("x"), newTicket("y")
	p := m.params(dead, 0, time.Second)
	p.TicketTTL = 5 * time.Second
	got, err := s.ModelAdmit(testContext(t), p)
	require.NoError(t, err)
	require.False(t, got.Admitted)
	require.Equal(t, 1, m.ask(alive, 0, 2*time.Second).Ahead)
	// The dead worker never asks again: its ticket holds the turn for
	// its TTL, then the next goes.
	require.Equal(t, 1, m.ask(alive, 0, 5*time.Second).Ahead)
	require.Zero(t, m.ask(alive, 0, 6*time.Second).Ahead)
	require.True(t, m.ask(alive, 0, store.ModelLimitWindow).Admitted)
	// A ticket renewed by its asks outlives its first TTL.
	slow, next := newTicket("x"), newTicket("y")
	for i := range 5 {
		p := m.params(slow, 0, store.ModelLimitWindow+time.Duration(i)*4*time.Second)
		p.TicketTTL = 5 * time.Second
		got, err := s.ModelAdmit(testContext(t), p)
		require.NoError(t, err)
		require.False(t, got.Admitted)
		require.Zero(t, got.Ahead)
	}
	require.Equal(t, 1, m.ask(next, 0, store.ModelLimitWindow+18*time.Second).Ahead)
}

func testModelDropAndRemoveOld(t *testing.T, s store.Store) {
	ctx := testContext(t)
	m := newModelAsker(t, s, 0, 1)
	require.True(t, m.ask(newTicket(""), 0, 0).Admitted)
	first, second := newTicket("a"), newTicket("b")
	require.False(t, m.ask(first, 0, time.Second).Admitted)
	require.Equal(t, 1, m.ask(second, 0, 2*time.Second).Ahead)
	drop := &store.ModelTicketDropParams{Namespace: store.DefaultNamespace, Ticket: first.id}
	require.NoError(t, s.ModelTicketDrop(ctx, drop))
	require.NoError(t, s.ModelTicketDrop(ctx, drop), "a ticket gone is dropped already")
	require.Zero(t, m.ask(second, 0, 3*time.Second).Ahead)
	require.True(t, m.ask(second, 0, store.ModelLimitWindow).Admitted)

	// The asks were an hour ago: out of any window by now.
	n, err := s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: 10 * time.Minute, Max: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: 10 * time.Minute, Max: 100})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	recent := m.ask(newTicket(""), 0, time.Hour) // now, about
	require.True(t, recent.Admitted)
	n, err = s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: 10 * time.Minute, Max: 100})
	require.NoError(t, err)
	require.Zero(t, n, "an admission in its window stays")
}

func testModelNotifies(t *testing.T, s store.Store) {
	ctx := testContext(t)
	l := s.NewListener()
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	hear := func(what string) {
		t.Helper()
		for {
			note, err := l.WaitForNotification(ctx) // the test's deadline ends a wait for nothing
			require.NoError(t, err, what)
			if len(note.Models) > 0 {
				require.Equal(t, []store.ModelKey{{Namespace: store.DefaultNamespace, Model: "gpt-test"}}, note.Models, what)
				return
			}
		}
	}
	m := newModelAsker(t, s, 1000, 0)
	hear("a limit set")
	a := newTicket("")
	require.True(t, m.ask(a, 800, time.Hour).Admitted)
	hear("an admission")
	b := newTicket("")
	require.False(t, m.ask(b, 800, time.Hour).Admitted)
	require.NoError(t, s.ModelSettle(ctx, &store.ModelSettleParams{Namespace: store.DefaultNamespace, Admission: a.id, Tokens: 100}))
	hear("a settlement below the reservation")
	require.NoError(t, s.ModelTicketDrop(ctx, &store.ModelTicketDropParams{Namespace: store.DefaultNamespace, Ticket: b.id}))
	hear("a drop")
	require.NoError(t, s.ModelLimitDelete(ctx, &store.ModelLimitDeleteParams{Namespace: store.DefaultNamespace, Model: "gpt-test"}))
	hear("a limit deleted")
}

func testModelRefusesBadInput(t *testing.T, s store.Store) {
	ctx := testContext(t)
	long := strings.Repeat("m", 201)
	for name, p := range map[string]store.ModelLimitSetParams{
		"no namespace":   {Model: "m", TokensPerMinute: 1},
		"no model":       {Namespace: "n", TokensPerMinute: 1},
		"long model":     {Namespace: "n", Model: long, TokensPerMinute: 1},
		"NUL in model":   {Namespace: "n", Model: "a\x00b", TokensPerMinute: 1},
		"no rate":        {Namespace: "n", Model: "m"},
		"negative":       {Namespace: "n", Model: "m", TokensPerMinute: -1},
		"tokens too big": {Namespace: "n", Model: "m", TokensPerMinute: store.MaxModelTokensPerMinute + 1},
		"rpm too big":    {Namespace: "n", Model: "m", RequestsPerMinute: store.MaxModelRequestsPerMinute + 1},
	} {
		require.Error(t, s.ModelLimitSet(ctx, &p), name)
	}
	require.Error(t, s.ModelLimitDelete(ctx, &store.ModelLimitDeleteParams{Namespace: "n"}))
	_, err := s.ModelLimitList(ctx, &store.ModelLimitListParams{})
	require.Error(t, err)
	good := store.ModelAdmitParams{Namespace: "n", Model: "m", Ticket: uuid.New(), TaskID: uuid.New(), Owner: "w", Tokens: 1, TicketTTL: time.Minute}
	for name, mutate := range map[string]func(p *store.ModelAdmitParams){
		"no ticket":     func(p *store.ModelAdmitParams) { p.Ticket = uuid.Nil },
		"no task":       func(p *store.ModelAdmitParams) { p.TaskID = uuid.Nil },
		"no owner":      func(p *store.ModelAdmitParams) { p.Owner = "" },
		"no model":      func(p *store.ModelAdmitParams) { p.Model = "" },
		"negative ask":  func(p *store.ModelAdmitParams) { p.Tokens = -1 },
		"huge ask":      func(p *store.ModelAdmitParams) { p.Tokens = store.MaxModelTokensPerMinute + 1 },
		"negative pos":  func(p *store.ModelAdmitParams) { p.Position = -1 },
		"short TTL":     func(p *store.ModelAdmitParams) { p.TicketTTL = time.Millisecond },
		"long TTL":      func(p *store.ModelAdmitParams) { p.TicketTTL = time.Hour },
		"long key":      func(p *store.ModelAdmitParams) { p.FairnessKey = strings.Repeat("k", store.MaxModelOwnerBytes+1) },
		"no namespace":  func(p *store.ModelAdmitParams) { p.Namespace = "" },
		"NUL in owner":  func(p *store.ModelAdmitParams) { p.Owner = "w\x00" },
		"bad key UTF-8": func(p *store.ModelAdmitParams) { p.FairnessKey = "\xff" },
	} {
		p := good
		mutate(&p)
		_, err := s.ModelAdmit(ctx, &p)
		require.Error(t, err, name)
	}
	require.Error(t, s.ModelSettle(ctx, &store.ModelSettleParams{Namespace: "n", Admission: uuid.New(), Tokens: -1}))
	require.Error(t, s.ModelSettle(ctx, &store.ModelSettleParams{Namespace: "n", Tokens: 1}))
	require.Error(t, s.ModelTicketDrop(ctx, &store.ModelTicketDropParams{Namespace: "n"}))
	_, err = s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: time.Second, Max: 1})
	require.Error(t, err, "keep shorter than the window")
	_, err = s.ModelAdmissionRemoveOld(ctx, &store.ModelAdmissionRemoveOldParams{Keep: time.Hour, Max: 0})
	require.Error(t, err)
}
