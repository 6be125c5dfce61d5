package storetest

import (
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// budgetTests: the statements of budgets (issue 38): scope budgets'
// definitions, windows locked, counted and read, open reservations,
// tasks waiting for a raise. The decisions over them are
// engine/internal/requests'.
var budgetTests = []conformanceTest{
	{"BudgetScopesAreSetListedAndDeleted", testBudgetScopes},
	{"BudgetScopesRefuseTheSameInvalidInput", testBudgetScopesInvalid},
	{"BudgetWindowsAreLockedCountedAndRead", testBudgetWindows},
	{"BudgetWindowsRolledBackWithTheirTx", testBudgetWindowsTx},
	{"BudgetReservationsAreInsertedOnceAndSettledOnce", testBudgetReservations},
	{"BudgetWaitsAreTakenOnce", testBudgetWaits},
}

func testBudgetScopes(t *testing.T, s store.Store) {
	ctx := testContext(t)
	ns := store.DefaultNamespace
	day := store.BudgetDef{Ref: "fairness_key:tenant-1", USD: 50, Window: 24 * time.Hour}
	hour := store.BudgetDef{Ref: "namespace", Tokens: 1_000_000, Window: time.Hour, OnExhausted: history.BudgetWait, WaitTimeout: 2 * time.Hour}
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: ns, Budget: day}))
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: ns, Budget: hour}))
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: "other", Budget: day}))
	day.USD = 75 // replaced
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: ns, Budget: day}))

	got, err := s.BudgetList(ctx, &store.BudgetListParams{Namespace: ns})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "fairness_key:tenant-1", got[0].Ref)
	require.Equal(t, 75.0, got[0].USD)
	require.Equal(t, 24*time.Hour, got[0].Window)
	require.Equal(t, history.BudgetFail, got[0].OnExhausted, "the default action is stored as fail")
	require.Equal(t, "namespace", got[1].Ref)
	require.Equal(t, int64(1_000_000), got[1].Tokens)
	require.Equal(t, history.BudgetWait, got[1].OnExhausted)
	require.Equal(t, 2*time.Hour, got[1].WaitTimeout)
	require.False(t, got[1].UpdatedAt.IsZero())

	require.NoError(t, s.BudgetDelete(ctx, &store.BudgetDeleteParams{Namespace: ns, Ref: "namespace"}))
	err = s.BudgetDelete(ctx, &store.BudgetDeleteParams{Namespace: ns, Ref: "namespace"})
	require.True(t, errors.Is(err, store.ErrNotFound), "deleting it again: %v", err)
	got, err = s.BudgetList(ctx, &store.BudgetListParams{Namespace: ns})
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func testBudgetScopesInvalid(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for _, b := range []store.BudgetDef{
		{Ref: "namespace", USD: 1, Window: 30 * time.Second},
		{Ref: "namespace", USD: 1, Window: 400 * 24 * time.Hour},
		{Ref: "namespace", USD: 1, Window: time.Minute + time.Millisecond},
		{Ref: "namespace", USD: -1, Window: time.Hour},
		{Ref: "namespace", Window: time.Hour},
		{Ref: "tenant-1", USD: 1, Window: time.Hour},
		{Ref: "fairness_key:", USD: 1, Window: time.Hour},
		{Ref: "task:0190a000-0000-7000-8000-00000000ba7c", USD: 1, Window: time.Hour},
		{Ref: "type:ocr", USD: 1, Window: time.Hour, OnExhausted: "pray"},
		{Ref: "type:ocr", USD: 1, Window: time.Hour, WaitTimeout: time.Hour},
	} {
		err := s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: store.DefaultNamespace, Budget: b})
		require.Error(t, err, "%+v", b)
	}
	require.Error(t, s.BudgetSet(ctx, &store.BudgetSetParams{Budget: store.BudgetDef{Ref: "namespace", USD: 1, Window: time.Hour}}), "no namespace")
	got, err := s.BudgetList(ctx, &store.BudgetListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Empty(t, got, "nothing was written")
}

func testBudgetWindows(t *testing.T, s store.Store) {
	ctx := testContext(t)
	ns := store.DefaultNamespace
	hour := store.BudgetWindowStart(time.Hour, time.Now())
	task := store.BudgetWindowKey{Ref: "task:" + uuid.NewString()}
	tenant := store.BudgetWindowKey{Ref: "fairness_key:t1", Start: hour}
	got, err := s.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: ns, Windows: []store.BudgetWindowLimit{
		{Key: tenant, LimitUSD: 1}, {Key: task, LimitTokens: 1000}, {Key: tenant, LimitUSD: 1},
	}})
	require.NoError(t, err)
	require.Len(t, got, 2, "each window once")
	require.Equal(t, "fairness_key:t1", got[0].Key.Ref, "in key order")
	require.True(t, hour.Equal(got[0].Key.Start))
	require.Equal(t, 1.0, got[0].LimitUSD)
	require.True(t, got[1].Key.Start.IsZero(), "a task budget's one window")
	require.Equal(t, int64(1000), got[1].LimitTokens)
	require.Zero(t, got[1].SpentTokens)

	require.NoError(t, s.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: ns, Deltas: []store.BudgetWindowDelta{
		{Key: task, ReservedTokens: 300}, {Key: tenant, ReservedUSD: 0.25}, {Key: task, ReservedTokens: 200},
	}}))
	require.NoError(t, s.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: ns, Deltas: []store.BudgetWindowDelta{
		{Key: task, ReservedTokens: -900, SpentTokens: 450, RaisedTokens: 100}, {Key: tenant, ReservedUSD: -0.25, SpentUSD: 0.5},
	}}))
	err = s.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: ns, Deltas: []store.BudgetWindowDelta{{Key: store.BudgetWindowKey{Ref: "type:never"}, SpentUSD: 1}}})
	require.True(t, errors.Is(err, store.ErrNotFound), "a window not written: %v", err)

	// A lock with new limits keeps the counts.
	got, err = s.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: ns, Windows: []store.BudgetWindowLimit{{Key: tenant, LimitUSD: 2}}})
	require.NoError(t, err)
	require.Equal(t, 2.0, got[0].LimitUSD)
	require.InDelta(t, 0.5, got[0].SpentUSD, 1e-9)

	read, err := s.BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: ns, Keys: []store.BudgetWindowKey{task, tenant, {Ref: "type:never"}}})
	require.NoError(t, err)
	require.Len(t, read, 2, "a window never written is left out")
	w := read[1]
	require.Equal(t, task.Ref, w.Key.Ref)
	require.Zero(t, w.ReservedTokens, "a reserved count stops at 0")
	require.Equal(t, int64(450), w.SpentTokens)
	require.Equal(t, int64(100), w.RaisedTokens)
	require.True(t, w.Fits(0, 650), "450 spent + 650 fits 1000 + 100 raised")
	require.False(t, w.Fits(0, 651))
	require.InDelta(t, 0.5, read[0].SpentUSD, 1e-9)
	require.Zero(t, read[0].ReservedUSD)

	other, err := s.BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: "other", Keys: []store.BudgetWindowKey{task}})
	require.NoError(t, err)
	require.Empty(t, other, "windows are a namespace's")
}

func testBudgetWindowsTx(t *testing.T, s store.Store) {
	ctx := testContext(t)
	key := store.BudgetWindowKey{Ref: "namespace", Start: store.BudgetWindowStart(time.Minute, time.Now())}
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: store.DefaultNamespace, Windows: []store.BudgetWindowLimit{{Key: key, LimitUSD: 1}}})
	require.NoError(t, err)
	require.NoError(t, tx.BudgetWindowAdd(ctx, &store.BudgetWindowAddParams{Namespace: store.DefaultNamespace, Deltas: []store.BudgetWindowDelta{{Key: key, ReservedUSD: 1}}}))
	err = tx.BudgetReservationInsert(ctx, &store.BudgetReservationInsertParams{Namespace: store.DefaultNamespace, TaskID: uuid.New(), Attempt: 1,
		Entries: []store.BudgetReservationEntry{{Key: key, USD: 1}}})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	read, err := s.BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: store.DefaultNamespace, Keys: []store.BudgetWindowKey{key}})
	require.NoError(t, err)
	require.Empty(t, read, "rolled back")
}

func testBudgetReservations(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := uuid.New()
	a := store.BudgetWindowKey{Ref: "task:" + id.String()}
	b := store.BudgetWindowKey{Ref: "type:ocr", Start: store.BudgetWindowStart(time.Hour, time.Now())}
	p := &store.BudgetReservationInsertParams{Namespace: store.DefaultNamespace, TaskID: id, Attempt: 2, Position: 3,
		Entries: []store.BudgetReservationEntry{{Key: b, USD: 0.5, Tokens: 10}, {Key: a, USD: 0.5, Tokens: 10}}}
	require.NoError(t, s.BudgetReservationInsert(ctx, p))

	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	err = tx.BudgetReservationInsert(ctx, p)
	require.True(t, errors.Is(err, store.ErrConflict), "the step holds one: %v", err)
	// The Tx is still usable after the refusal.
	p2 := *p
	p2.Position = 4
	require.NoError(t, tx.BudgetReservationInsert(ctx, &p2))
	require.NoError(t, tx.Commit(ctx))

	got, err := s.BudgetReservationDelete(ctx, &store.BudgetReservationDeleteParams{TaskID: id, Attempt: 2, Position: 3})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, a.Ref, got[0].Key.Ref, "in key order")
	require.True(t, got[0].Key.Start.IsZero())
	require.Equal(t, b.Ref, got[1].Key.Ref)
	require.True(t, b.Start.Equal(got[1].Key.Start))
	require.Equal(t, 0.5, got[1].USD)
	require.Equal(t, int64(10), got[1].Tokens)

	again, err := s.BudgetReservationDelete(ctx, &store.BudgetReservationDeleteParams{TaskID: id, Attempt: 2, Position: 3})
	require.NoError(t, err)
	require.Empty(t, again, "settled once")
	other, err := s.BudgetReservationDelete(ctx, &store.BudgetReservationDeleteParams{TaskID: id, Attempt: 2, Position: 4})
	require.NoError(t, err)
	require.Len(t, other, 2)
}

func testBudgetWaits(t *testing.T, s store.Store) {
	ctx := testContext(t)
	key := store.BudgetWindowKey{Ref: "fairness_key:t1", Start: store.BudgetWindowStart(time.Hour, time.Now())}
	t1, t2 := uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{t1, t2, t1} {
		require.NoError(t, s.BudgetWaitInsert(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace, Key: key, TaskID: id}))
	}
	require.NoError(t, s.BudgetWaitInsert(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace,
		Key: store.BudgetWindowKey{Ref: "fairness_key:t2", Start: key.Start}, TaskID: uuid.New()}))
	got, err := s.BudgetWaitTake(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace, Key: key})
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{t1, t2}, got)
	got, err = s.BudgetWaitTake(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace, Key: key})
	require.NoError(t, err)
	require.Empty(t, got, "taken once")
}
