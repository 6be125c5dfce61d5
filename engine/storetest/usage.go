package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// usageTests: the reads of the usage roll-ups (TaskUsageList,
// UsageSeries), from the histories the store's own writes made.
var usageTests = []conformanceTest{
	{"TaskUsageListReadsUsageChildrenAndNextRun", testTaskUsageList},
	{"TaskUsageListRefusesBadParams", testTaskUsageListRefusals},
	{"UsageSeriesSumsReportsByKeyAndBucket", testUsageSeries},
	{"UsageSeriesRefusesBadParams", testUsageSeriesRefusals},
}

// Costs are multiples of 1/64, so sums are exact in any order.
var (
	usagePlan  = history.Usage{Model: "small", InputTokens: 100, OutputTokens: 20, CostUSD: 0.25}
	usageRetry = history.Usage{Model: "large", InputTokens: 7, OutputTokens: 0, CostUSD: 0.5}
	usageDone  = history.Usage{Model: "small", InputTokens: 3, OutputTokens: 4, CostUSD: 0.015625}
)

// spendingChildren run the two default tasks: the first fails for good
// in an attempt that paid usageRetry, the second completes a step that
// paid usageDone and usagePlan. It returns their ids in that order.
func spendingChildren(t *testing.T, s store.Store) (failed, completed uuid.UUID) {
	t.Helper()
	ct := claimOne(t, s, "w", time.Minute)
	evidence := history.ErrorInfo{Class: history.Permanent, Message: "refused"}
	_, err := appendFenced(t, s, ct, history.AttemptFailedData{Error: evidence, Usage: []history.Usage{usageRetry}},
		history.TaskFailedData{Error: evidence})
	require.NoError(t, err)
	ok := claimOne(t, s, "w", time.Minute)
	_, err = appendFenced(t, s, ok, history.StepCompletedData{Position: 0, Name: "extract", Usage: []history.Usage{usageDone, usagePlan}},
		history.TaskCompletedData{Output: completedOutput})
	require.NoError(t, err)
	return ct.Task.ID, ok.Task.ID
}

func usageFacts(t *testing.T, s store.Store, ids ...uuid.UUID) map[uuid.UUID]store.TaskUsageFacts {
	t.Helper()
	facts, err := s.TaskUsageList(testContext(t), &store.TaskUsageListParams{Namespace: store.DefaultNamespace, IDs: ids})
	require.NoError(t, err)
	out := map[uuid.UUID]store.TaskUsageFacts{}
	for _, f := range facts {
		require.NotContains(t, out, f.ID, "a task read twice")
		out[f.ID] = f
	}
	return out
}

func testTaskUsageList(t *testing.T, s store.Store) {
	parent, res := startChildren(t, s, 2)
	st, err := appendFenced(t, s, parent, history.StepCompletedData{Position: 0, Name: "plan", Usage: []history.Usage{usagePlan}})
	require.NoError(t, err)
	parent.State = st
	awaitChildren(t, s, parent, 0, 1)
	failed, done := spendingChildren(t, s)
	require.ElementsMatch(t, res.IDs, []uuid.UUID{failed, done})

	// A run that continued as new, with a step of no usage.
	run := start(t, s, spec{Type: "poller"})
	p := claimParams("w", 1, time.Minute)
	p.Types = []store.TypeKey{{Type: "poller", Version: 1}}
	ct := claim(t, s, p)[0]
	cp := continueParams(ct)
	cp.Run.Payloads = []history.Payload{history.StepCompletedData{Position: 0, Name: "poll"}}
	next, err := requests.ContinueAsNew(testContext(t), s, cp)
	require.NoError(t, err)

	other := start(t, s, spec{Namespace: "elsewhere"})
	facts := usageFacts(t, s, parent.Task.ID, res.IDs[0], res.IDs[1], run, next.NextID, other, uuid.New())
	require.Len(t, facts, 5, "the parent, its children and the runs; not another namespace's task nor an unknown id")

	pf := facts[parent.Task.ID]
	require.Equal(t, parentType, pf.Type)
	require.Equal(t, history.StatusPending, pf.Status)
	require.Equal(t, []history.Usage{usagePlan}, pf.Usage)
	require.Equal(t, res.IDs, pf.Children, "the children by position")
	require.Equal(t, uuid.Nil, pf.ContinuedAs)

	require.Equal(t, []history.Usage{usageRetry}, facts[failed].Usage, "a failed attempt's usage")
	require.Equal(t, history.StatusFailed, facts[failed].Status)
	require.Equal(t, []history.Usage{usageDone, usagePlan}, facts[done].Usage, "a step's usage, in its order")
	require.Empty(t, facts[done].Children)

	rf := facts[run]
	require.Empty(t, rf.Usage)
	require.Equal(t, next.NextID, rf.ContinuedAs)
	require.Equal(t, history.StatusContinued, rf.Status)
	require.Equal(t, "poller", facts[next.NextID].Type)

	keyed := start(t, s, spec{FairnessKey: "tenant-a"})
	require.Equal(t, "tenant-a", usageFacts(t, s, keyed)[keyed].FairnessKey)
}

func testTaskUsageListRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for p, want := range map[*store.TaskUsageListParams]string{
		nil:                            "namespace is required",
		{IDs: []uuid.UUID{uuid.New()}}: "namespace is required",
		{Namespace: "default"}:         "0 ids; ask for 1 to 1000",
		{Namespace: "default", IDs: make([]uuid.UUID, store.MaxTaskUsageListIDs+1)}: "1001 ids",
	} {
		_, err := s.TaskUsageList(ctx, p)
		require.ErrorContains(t, err, want, "%+v", p)
	}
}

// testUsageSeries: usage of two tenants and two types, its buckets by
// each event's time, summed by each breakdown; another namespace's and
// what lies outside the window left out.
func testUsageSeries(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a := start(t, s, spec{FairnessKey: "tenant-a"})
	ca := claimOne(t, s, "w", time.Minute)
	require.Equal(t, a, ca.Task.ID)
	_, err := appendFenced(t, s, ca, history.StepCompletedData{Position: 0, Name: "one", Usage: []history.Usage{usagePlan, usageRetry}},
		history.TaskCompletedData{Output: completedOutput})
	require.NoError(t, err)
	start(t, s, spec{Type: "poller"})
	p := claimParams("w", 1, time.Minute)
	p.Types = []store.TypeKey{{Type: "poller", Version: 1}}
	cb := claim(t, s, p)[0]
	_, err = appendFenced(t, s, cb, history.AttemptFailedData{
		Error: history.ErrorInfo{Class: history.Permanent, Message: "no"}, Usage: []history.Usage{usageDone},
	}, history.TaskFailedData{Error: history.ErrorInfo{Class: history.Permanent, Message: "no"}})
	require.NoError(t, err)
	start(t, s, spec{Namespace: "elsewhere"})
	po := claimParams("w", 1, time.Minute)
	po.Namespace = "elsewhere"
	co := claim(t, s, po)[0]
	_, err = appendFenced(t, s, co, history.StepCompletedData{Position: 0, Name: "x", Usage: []history.Usage{usagePlan}})
	require.NoError(t, err)

	var at []time.Time // the times of the two usage events
	for _, id := range []uuid.UUID{a, cb.Task.ID} {
		for _, e := range events(t, s, id) {
			if len(history.UsageOf(e.Data)) > 0 {
				at = append(at, e.At)
			}
		}
	}
	require.Len(t, at, 2)
	step := time.Minute
	from, until, buckets, err := cairntype.UsageWindow(at[0].Add(-10*time.Minute), at[1].Add(time.Second), step, time.Time{})
	require.NoError(t, err)
	bucket := func(when time.Time) int { return int(when.Sub(from) / step) }

	read := func(by cairntype.UsageBy, from, until time.Time) map[string]cairntype.UsageTotal {
		t.Helper()
		cells, err := s.UsageSeries(ctx, &store.UsageSeriesParams{Namespace: store.DefaultNamespace, By: by, From: from, Until: until, Step: step})
		require.NoError(t, err)
		out := map[string]cairntype.UsageTotal{}
		for _, c := range cells {
			require.GreaterOrEqual(t, c.Bucket, 0)
			require.Less(t, c.Bucket, buckets)
			out[fmt.Sprintf("%s@%d", c.Key, c.Bucket)] = c.UsageTotal
		}
		return out
	}
	key := func(k string, when time.Time) string { return fmt.Sprintf("%s@%d", k, bucket(when)) }
	total := func(us ...history.Usage) cairntype.UsageTotal {
		var u cairntype.UsageTotal
		for _, x := range us {
			u.Add(x)
		}
		return u
	}
	require.Equal(t, map[string]cairntype.UsageTotal{
		key("tenant-a", at[0]): total(usagePlan, usageRetry),
		key("", at[1]):         total(usageDone),
	}, read(cairntype.UsageByFairnessKey, from, until))
	byModel := map[string]cairntype.UsageTotal{key("small", at[0]): total(usagePlan), key("large", at[0]): total(usageRetry)}
	small := total(usageDone)
	if k := key("small", at[1]); k == key("small", at[0]) {
		small = total(usagePlan, usageDone)
	}
	byModel[key("small", at[1])] = small
	require.Equal(t, byModel, read(cairntype.UsageByModel, from, until))
	byType := read(cairntype.UsageByType, from, until)
	require.Equal(t, total(usagePlan, usageRetry), byType[key(defaultType, at[0])])
	require.Equal(t, total(usageDone), byType[key("poller", at[1])])
	require.Len(t, byType, 2)

	require.Empty(t, read(cairntype.UsageByModel, from, from.Add(step*time.Duration(bucket(at[0])))),
		"a window that ends before the first report reads nothing")
	none, err := s.UsageSeries(ctx, &store.UsageSeriesParams{Namespace: "nobody", By: cairntype.UsageByModel, From: from, Until: until, Step: step})
	require.NoError(t, err)
	require.Empty(t, none)
}

func testUsageSeriesRefusals(t *testing.T, s store.Store) {
	ctx := testContext(t)
	now := time.Now()
	ok := store.UsageSeriesParams{Namespace: "default", By: cairntype.UsageByModel, From: now.Add(-time.Hour), Until: now, Step: time.Minute}
	with := func(f func(p *store.UsageSeriesParams)) *store.UsageSeriesParams {
		p := ok
		f(&p)
		return &p
	}
	for p, want := range map[*store.UsageSeriesParams]string{
		nil: "namespace is required",
		with(func(p *store.UsageSeriesParams) { p.Namespace = "" }):                       "namespace is required",
		with(func(p *store.UsageSeriesParams) { p.By = "tenant" }):                        `by "tenant" is not one of`,
		with(func(p *store.UsageSeriesParams) { p.Step = time.Second }):                   "step 1s must be 1m0s or more",
		with(func(p *store.UsageSeriesParams) { p.From = now }):                           "from must be before until",
		with(func(p *store.UsageSeriesParams) { p.From = now.Add(-32 * 24 * time.Hour) }): "is over 744h0m0s",
		with(func(p *store.UsageSeriesParams) { p.From = now.Add(-30 * 24 * time.Hour) }): "buckets; at most 744",
	} {
		_, err := s.UsageSeries(ctx, p)
		require.ErrorContains(t, err, want, "%+v", p)
	}
}
