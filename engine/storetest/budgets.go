package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/requests"
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

	// A namespace holds MaxBudgets; a replace still goes at the bound.
	for i := 1; i < store.MaxBudgets; i++ {
		require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: "full",
			Budget: store.BudgetDef{Ref: fmt.Sprintf("fairness_key:t%04d", i), USD: 1, Window: time.Hour}}))
	}
	last := store.BudgetDef{Ref: "namespace", USD: 1, Window: time.Hour}
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: "full", Budget: last}))
	err = s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: "full", Budget: store.BudgetDef{Ref: "type:one-more", USD: 1, Window: time.Hour}})
	require.ErrorContains(t, err, "budgets already")
	require.True(t, errors.Is(err, store.ErrConflict), "%v", err)
	last.USD = 2
	require.NoError(t, s.BudgetSet(ctx, &store.BudgetSetParams{Namespace: "full", Budget: last}))
	got, err = s.BudgetList(ctx, &store.BudgetListParams{Namespace: "full"})
	require.NoError(t, err)
	require.Len(t, got, store.MaxBudgets)
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

// budgetComposites: the reservation, settlement, refusal, raise and
// rescue of budgets (engine/internal/requests and the rescuer) over each
// store's statements.
var budgetComposites = []conformanceTest{
	{"BudgetReserveSettleAndRefuse", testBudgetReserveSettleRefuse},
	{"BudgetRefusalThatWaitsEndsTheAttemptAndARaiseWakesIt", testBudgetWaitRaise},
	{"BudgetWaitOnAWindowIsDueWhenTheWindowEnds", testBudgetWaitWindowEnd},
	{"BudgetRowsGoWithTheirTaskWhenRetentionRemovesIt", testBudgetRowsRemovedWithTask},
	{"BudgetReservationOfAnExpiredLeaseIsSettledByTheRescuer", testBudgetRescue},
}

// tenantBudget is a fairness key's budget of $1 in the current hour.
func tenantBudget(action string) requests.Budget {
	return requests.Budget{Key: store.BudgetWindowKey{Ref: "fairness_key:t1", Start: store.BudgetWindowStart(time.Hour, time.Now())},
		LimitUSD: 1, OnExhausted: action}
}

func reserveFor(t *testing.T, s store.Store, ct *store.ClaimedTask, st history.State, position int, usd float64, budgets ...requests.Budget) (requests.ReserveResult, error) {
	t.Helper()
	return requests.Reserve(testContext(t), s, &requests.ReserveParams{
		Append:   store.EventAppendParams{TaskID: ct.Task.ID, State: st, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt},
		Position: position, Step: "call", Spend: history.Spend{Model: "m", CostUSD: usd, Tokens: 100}, Budgets: budgets, Now: time.Now(),
	})
}

func windowOf(t *testing.T, s store.Store, key store.BudgetWindowKey) store.BudgetWindow {
	t.Helper()
	ws, err := s.BudgetWindowList(testContext(t), &store.BudgetWindowListParams{Namespace: store.DefaultNamespace, Keys: []store.BudgetWindowKey{key}})
	require.NoError(t, err)
	require.Len(t, ws, 1)
	return ws[0]
}

func testBudgetReserveSettleRefuse(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	own := requests.Budget{Key: store.BudgetWindowKey{Ref: "task:" + id.String()}, LimitTokens: 1000}
	tenant := tenantBudget(history.BudgetFail)

	res, err := reserveFor(t, s, ct, ct.State, 0, 0.6, tenant, own)
	require.NoError(t, err)
	require.Nil(t, res.Refused)
	require.Len(t, res.State.Reservations, 1)
	require.Equal(t, 0.6, windowOf(t, s, tenant.Key).ReservedUSD)
	require.Equal(t, int64(100), windowOf(t, s, own.Key).ReservedTokens)

	// A parallel step: 0.6 + 0.6 is over the $1: refused, nothing held.
	res2, err := reserveFor(t, s, ct, res.State, 1, 0.6, tenant, own)
	require.NoError(t, err)
	require.NotNil(t, res2.Refused)
	require.Equal(t, history.BudgetFail, res2.Refused.Action)
	require.Equal(t, "fairness_key:t1", res2.Refused.Budget.Ref)
	require.Equal(t, 0.6, res2.Refused.ReservedUSD)
	require.Equal(t, 0.6, windowOf(t, s, tenant.Key).ReservedUSD, "the refusal took nothing")

	st, err := requests.Settle(testContext(t), s, &requests.SettleParams{
		Append:   store.EventAppendParams{TaskID: id, State: res2.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt},
		Position: 0, Step: "call", Reason: history.SettleStepCompleted, Reserved: true, Tokens: 80, CostUSD: 0.5,
	})
	require.NoError(t, err)
	require.Empty(t, st.Reservations)
	w := windowOf(t, s, tenant.Key)
	require.Zero(t, w.ReservedUSD)
	require.Equal(t, 0.5, w.SpentUSD)
	require.Equal(t, int64(80), windowOf(t, s, own.Key).SpentTokens)
	types := eventTypes(t, s, id)
	require.Equal(t, []history.Type{history.BudgetReserved, history.BudgetRefused, history.BudgetSettled}, types[len(types)-3:])

	// A stale attempt's reservation is fenced: nothing held.
	stale := *ct
	stale.State.Lease.Epoch++
	_, err = reserveFor(t, s, &stale, st, 2, 0.1, tenant)
	require.Error(t, err)
	require.Zero(t, windowOf(t, s, tenant.Key).ReservedUSD, "rolled back with the fenced append")
}

func testBudgetWaitRaise(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	other := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	waits := tenantBudget(history.BudgetWait)
	res, err := reserveFor(t, s, ct, ct.State, 0, 1.5, waits)
	require.NoError(t, err)
	require.NotNil(t, res.Refused)
	require.Equal(t, history.BudgetWait, res.Refused.Action)
	require.NotNil(t, res.Refused.Deadline)
	require.Equal(t, history.StatusPending, res.State.Status, "the attempt ended waiting")
	require.NotNil(t, res.State.BudgetWait)
	require.Empty(t, claim(t, s, claimParams("w2", 10, time.Minute))[1:], "only the other task is claimable")

	got, err := requests.RaiseBudget(testContext(t), s, &requests.RaiseParams{Namespace: store.DefaultNamespace, Budget: waits,
		USD: 1, By: "alice", Reason: "month end", At: time.Now()})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id}, got.Woken, "exactly the task that waited")
	require.Equal(t, 1.0, got.Window.RaisedUSD)
	task := getTask(t, s, id)
	require.False(t, task.RunAt.After(time.Now()), "due at once")
	evs := events(t, s, id)
	raised := evs[len(evs)-1].Data.(history.BudgetRaisedData)
	require.Equal(t, "alice", raised.By)
	require.Equal(t, 2.0, raised.LimitUSD)
	require.NotContains(t, eventTypes(t, s, other), history.BudgetRaised)

	again := claimWhenDue(t, s, claimParams("w3", 1, time.Minute))
	require.Equal(t, id, again.Task.ID)
	res, err = reserveFor(t, s, again, again.State, 0, 1.5, waits)
	require.NoError(t, err)
	require.Nil(t, res.Refused, "1.5 fits the raised $2")
	require.Nil(t, res.State.BudgetWait)
}

// A task waiting on a scope budget's window is due again when the
// window ends (before its deadline): the next window may have room.
func testBudgetWaitWindowEnd(t *testing.T, s store.Store) {
	id := start(t, s, spec{})
	ct := claimOne(t, s, "w", time.Minute)
	hourly := tenantBudget(history.BudgetWait)
	hourly.Window = time.Hour
	res, err := reserveFor(t, s, ct, ct.State, 0, 1.5, hourly)
	require.NoError(t, err)
	require.NotNil(t, res.Refused)
	end := hourly.Key.Start.Add(time.Hour)
	require.NotNil(t, res.Refused.WindowEnd)
	require.True(t, end.Equal(*res.Refused.WindowEnd), "window end %s, want %s", res.Refused.WindowEnd, end)
	require.True(t, res.Refused.Deadline.After(end), "the default timeout outlasts the window")
	require.True(t, end.Equal(getTask(t, s, id).RunAt), "due when the window ends")

	// A task's own budget has no window: due at the deadline.
	other := start(t, s, spec{})
	ct = claimOne(t, s, "w", time.Minute)
	require.Equal(t, other, ct.Task.ID)
	own := requests.Budget{Key: store.BudgetWindowKey{Ref: "task:" + other.String()}, LimitUSD: 1, OnExhausted: history.BudgetWait}
	res, err = reserveFor(t, s, ct, ct.State, 0, 1.5, own)
	require.NoError(t, err)
	require.Nil(t, res.Refused.WindowEnd)
	require.WithinDuration(t, *res.Refused.Deadline, getTask(t, s, other).RunAt, time.Millisecond, "due at the deadline")
}

// Retention removes what a removed task kept for budgets (its open
// reservations, its waits, its own budget's window) and leaves a kept
// task's and the scope budgets' alone.
func testBudgetRowsRemovedWithTask(t *testing.T, s store.Store) {
	ctx := testContext(t)
	done := start(t, s, spec{})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	kept := start(t, s, spec{})
	tenant := store.BudgetWindowKey{Ref: "fairness_key:t1", Start: store.BudgetWindowStart(time.Hour, time.Now())}
	for _, id := range []uuid.UUID{done, kept} {
		own := store.BudgetWindowKey{Ref: "task:" + id.String()}
		_, err := s.BudgetWindowLock(ctx, &store.BudgetWindowLockParams{Namespace: store.DefaultNamespace,
			Windows: []store.BudgetWindowLimit{{Key: own, LimitUSD: 1}, {Key: tenant, LimitUSD: 5}}})
		require.NoError(t, err)
		require.NoError(t, s.BudgetReservationInsert(ctx, &store.BudgetReservationInsertParams{Namespace: store.DefaultNamespace,
			TaskID: id, Attempt: 1, Position: 0, Entries: []store.BudgetReservationEntry{{Key: own, USD: 0.1}, {Key: tenant, USD: 0.1}}}))
		require.NoError(t, s.BudgetWaitInsert(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace, Key: tenant, TaskID: id}))
	}
	require.Equal(t, 1, removeFinished(t, s, time.Now().Add(time.Hour), 10).Tasks)

	windows, err := s.BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: store.DefaultNamespace, Keys: []store.BudgetWindowKey{
		{Ref: "task:" + done.String()}, {Ref: "task:" + kept.String()}, tenant}})
	require.NoError(t, err)
	var refs []string
	for _, w := range windows {
		refs = append(refs, w.Key.Ref)
	}
	require.ElementsMatch(t, []string{"task:" + kept.String(), tenant.Ref}, refs, "the removed task's own window went with it")
	for id, want := range map[uuid.UUID]int{done: 0, kept: 2} {
		entries, err := s.BudgetReservationDelete(ctx, &store.BudgetReservationDeleteParams{TaskID: id, Attempt: 1, Position: 0})
		require.NoError(t, err)
		require.Len(t, entries, want, "reservation rows of %s", id)
	}
	waiting, err := s.BudgetWaitTake(ctx, &store.BudgetWaitParams{Namespace: store.DefaultNamespace, Key: tenant})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{kept}, waiting)
}

func testBudgetRescue(t *testing.T, s store.Store) {
	id := start(t, s, spec{MaxAttempts: 3})
	ct := claimOne(t, s, "crashed", shortTTL)
	tenant := tenantBudget(history.BudgetFail)
	res, err := reserveFor(t, s, ct, ct.State, 0, 0.3, tenant)
	require.NoError(t, err)
	// The first step ran and is on record, the second reserved and its
	// worker died before either settled.
	st, err := s.EventAppend(testContext(t), &store.EventAppendParams{TaskID: id, State: res.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt,
		Payloads: []history.Payload{history.StepCompletedData{Position: 0, Name: "call", Usage: []history.Usage{{Model: "m", InputTokens: 10, OutputTokens: 20, CostUSD: 0.2}}}}})
	require.NoError(t, err)
	res, err = reserveFor(t, s, ct, st, 1, 0.4, tenant)
	require.NoError(t, err)
	require.Len(t, res.State.Reservations, 2)
	require.InDelta(t, 0.7, windowOf(t, s, tenant.Key).ReservedUSD, 1e-9)

	time.Sleep(shortTTL)
	rescueOne(t, s)
	w := windowOf(t, s, tenant.Key)
	require.Zero(t, w.ReservedUSD, "nothing is held past the lease")
	require.InDelta(t, 0.2+0.4, w.SpentUSD, 1e-9, "the recorded step's usage, and the whole of the other's reservation")
	evs := events(t, s, id)
	var settled []history.BudgetSettledData
	for _, e := range evs {
		if d, ok := e.Data.(history.BudgetSettledData); ok {
			settled = append(settled, d)
		}
	}
	require.Len(t, settled, 2)
	for _, d := range settled {
		require.Equal(t, history.SettleLeaseExpired, d.Reason)
	}
	require.Equal(t, 0.2, settled[0].CostUSD)
	require.Equal(t, int64(30), settled[0].Tokens)
	require.Equal(t, 0.4, settled[1].CostUSD)
	require.Equal(t, history.LeaseExpired, evs[len(evs)-1].Type())
	task := getTask(t, s, id)
	require.Equal(t, history.StatusRetrying, task.Status)
	n, err := maintenance.RescueExpired(testContext(t), s, 100)
	require.NoError(t, err)
	require.Zero(t, n, "rescued once")
	again, err := s.BudgetReservationDelete(testContext(t), &store.BudgetReservationDeleteParams{TaskID: id, Attempt: 1, Position: 1})
	require.NoError(t, err)
	require.Empty(t, again, "the reservation rows went with it")
}
