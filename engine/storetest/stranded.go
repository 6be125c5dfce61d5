package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// strandedTests: deploy-check findings, replaced per worker and type,
// listed for tasks not finished.
var strandedTests = []conformanceTest{
	{"StrandedReplaceAndList", testStrandedReplaceAndList},
	{"StrandedRefusesBadInput", testStrandedRefusesBadInput},
}

func testStrandedReplaceAndList(t *testing.T, s store.Store) {
	ctx := testContext(t)
	a := start(t, s, spec{Type: "doc", Version: 1})
	b := start(t, s, spec{Type: "doc", Version: 1})
	done := start(t, s, spec{Type: "doc", Version: 1})
	other := start(t, s, spec{Type: "mail", Version: 2})
	finding := func(id uuid.UUID, called string) store.StrandedTask {
		return store.StrandedTask{TaskID: id, Kind: "receive", Position: 0, Recorded: "approve", Called: called,
			Error: "receive 0: history recorded a receive of signal \"approve\", workflow called a receive of " + called}
	}
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1,
		WorkerID: "w1", Tasks: []store.StrandedTask{finding(a, `(step 1 "classify")`), finding(b, "x"), finding(done, "x")}}))
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "mail", Version: 2,
		WorkerID: "w2", Tasks: []store.StrandedTask{finding(other, "y")}}))
	// A finished task is not listed.
	claimed := claim(t, s, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 10, LeaseTTL: time.Minute, Exclude: []uuid.UUID{a, b}})
	require.Len(t, claimed, 1)
	complete(t, s, claimed[0])

	list, err := s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace, Type: "doc"})
	require.NoError(t, err)
	require.Len(t, list, 2)
	got := map[uuid.UUID]store.StrandedTask{}
	for _, f := range list {
		got[f.TaskID] = f
	}
	fa := got[a]
	require.Equal(t, store.DefaultNamespace, fa.Namespace)
	require.Equal(t, "doc", fa.Type)
	require.Equal(t, 1, fa.Version)
	require.Equal(t, "w1", fa.WorkerID)
	require.Equal(t, "receive", fa.Kind)
	require.Equal(t, "approve", fa.Recorded)
	require.Equal(t, `(step 1 "classify")`, fa.Called)
	require.True(t, strings.HasPrefix(fa.Error, "receive 0"))
	require.Equal(t, history.StatusPending, fa.Status)
	require.False(t, fa.FoundAt.IsZero())
	require.False(t, fa.RunAt.IsZero())
	require.Equal(t, "default", fa.Queue)
	elsewhere, err := s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace, Queue: "other"})
	require.NoError(t, err)
	require.Empty(t, elsewhere)

	all, err := s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, all, 3)
	one, err := s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace, Limit: 1})
	require.NoError(t, err)
	require.Len(t, one, 1)
	none, err := s.StrandedList(ctx, &store.StrandedListParams{Namespace: "elsewhere"})
	require.NoError(t, err)
	require.Empty(t, none)

	// A replace drops the worker's earlier findings of the type; another
	// worker's stay.
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1,
		WorkerID: "w1", Tasks: []store.StrandedTask{finding(b, "z")}}))
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1,
		WorkerID: "w3", Tasks: []store.StrandedTask{finding(b, "w")}}))
	list, err = s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace, Type: "doc"})
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, f := range list {
		require.Equal(t, b, f.TaskID)
	}
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1, WorkerID: "w1"}))
	require.NoError(t, s.StrandedReplace(ctx, &store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1, WorkerID: "w3"}))
	list, err = s.StrandedList(ctx, &store.StrandedListParams{Namespace: store.DefaultNamespace, Type: "doc"})
	require.NoError(t, err)
	require.Empty(t, list)
}

func testStrandedRefusesBadInput(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := uuid.New()
	ok := store.StrandedReplaceParams{Namespace: store.DefaultNamespace, Type: "doc", Version: 1, WorkerID: "w"}
	for name, mutate := range map[string]func(p *store.StrandedReplaceParams){
		"no namespace": func(p *store.StrandedReplaceParams) { p.Namespace = "" },
		"no worker":    func(p *store.StrandedReplaceParams) { p.WorkerID = "" },
		"version 0":    func(p *store.StrandedReplaceParams) { p.Version = 0 },
		"no task id":   func(p *store.StrandedReplaceParams) { p.Tasks = []store.StrandedTask{{}} },
		"twice": func(p *store.StrandedReplaceParams) {
			p.Tasks = []store.StrandedTask{{TaskID: id}, {TaskID: id}}
		},
		"NUL": func(p *store.StrandedReplaceParams) { p.Tasks = []store.StrandedTask{{TaskID: id, Called: "a\x00b"}} },
		"too many": func(p *store.StrandedReplaceParams) {
			p.Tasks = make([]store.StrandedTask, store.MaxStrandedFindings+1)
		},
	} {
		p := ok
		mutate(&p)
		require.Error(t, s.StrandedReplace(ctx, &p), name)
	}
	for _, p := range []*store.StrandedListParams{{}, {Namespace: "default", Limit: -1}, {Namespace: "default", Limit: store.MaxStrandedList + 1}} {
		_, err := s.StrandedList(ctx, p)
		require.Error(t, err, "%+v", p)
	}
}
