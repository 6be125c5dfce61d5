package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// usageNode is a task of the batch tests' tree: the usage its one step
// reports (and, when FailOnce, reports on a failed first attempt too),
// and its children.
type usageNode struct {
	ID       int         `json:"id"`
	FailOnce bool        `json:"fail_once,omitempty"`
	Kids     []usageNode `json:"kids,omitempty"`
}

// nodeUsage is what node id's step reports; costs are multiples of
// 1/64, so every sum is exact whatever its order.
func nodeUsage(id int) history.Usage {
	return history.Usage{Model: []string{"small", "large"}[id%2], InputTokens: int64(10 * (id + 1)), OutputTokens: int64(id), CostUSD: float64(id+1) / 64}
}

// expectedUsage is what n's subtree spent, from the spec alone.
func expectedUsage(n usageNode) (cairntype.UsageTotal, int) {
	var u cairntype.UsageTotal
	u.Add(nodeUsage(n.ID))
	if n.FailOnce {
		u.Add(nodeUsage(n.ID))
	}
	tasks := 1
	for _, k := range n.Kids {
		ku, kt := expectedUsage(k)
		u.Merge(ku)
		tasks += kt
	}
	return u, tasks
}

// requireRollUpSums checks the roll-up's recursion: Total is Own plus
// every child's Total, in position order, exactly; the models add up to
// Total.
func requireRollUpSums(t require.TestingT, u *cairntype.TaskUsage) {
	sum := u.Own
	tasks := 1
	for i, c := range u.Children {
		require.Equal(t, i, c.Position)
		sum.Merge(c.Total)
		tasks += c.Tasks
	}
	require.Equal(t, sum, u.Total, "a parent's roll-up is its own usage plus its children's roll-ups")
	require.Equal(t, tasks, u.Tasks)
	var models cairntype.UsageTotal
	for _, m := range u.ByModel {
		models.Merge(m.UsageTotal)
	}
	require.Equal(t, u.Total.Tokens(), models.Tokens())
	require.Equal(t, u.Total.Reports, models.Reports)
	require.InDelta(t, u.Total.CostUSD, models.CostUSD, 1e-9)
}

// TestTaskUsageRollsUpABatchRunByAWorker runs a tree of eight tasks (a
// batch of three children, one with two of its own, one with a child of
// a child), some steps failing once after paying, and checks the roll-up
// against what the spec says they spent, its recursion, each child's own
// roll-up and a fold of every history; and the namespace's series.
func TestTaskUsageRollsUpABatchRunByAWorker(t *testing.T) {
	t.Parallel()
	tree := usageNode{ID: 0, Kids: []usageNode{
		{ID: 1, FailOnce: true, Kids: []usageNode{{ID: 4}, {ID: 5, FailOnce: true}}},
		{ID: 2},
		{ID: 3, Kids: []usageNode{{ID: 6, Kids: []usageNode{{ID: 7, FailOnce: true}}}}},
	}}
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 8})
		var (
			mu     sync.Mutex
			failed = map[int]bool{}
		)
		var node *sdk.Workflow[usageNode, int]
		node = sdk.NewWorkflow("usage.node", 1, func(ctx workflow.Context, n usageNode) (int, error) {
			if _, err := workflow.Step(ctx, "call", func(ctx context.Context) (int, error) {
				activities.RecordUsage(ctx, nodeUsage(n.ID))
				mu.Lock()
				defer mu.Unlock()
				if n.FailOnce && !failed[n.ID] {
					failed[n.ID] = true
					return 0, errors.New("provider hiccup")
				}
				return n.ID, nil
			}, &workflow.StepOpts{Retry: fastRetry(3)}); err != nil {
				return 0, err
			}
			_, err := workflow.MapChildren(ctx, node, n.Kids, nil)
			return n.ID, err
		}, nil)
		sdk.Register(b.worker, node)
		startWorker(t, b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, node, tree, &sdk.StartOpts{FairnessKey: "tenant-x"})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 2*testTimeout)
		defer cancel()
		_, err = run.Result(waitCtx)
		require.NoError(t, err)

		u, err := b.client.TaskUsage(ctx, run.ID, &sdk.TaskUsageOpts{Children: true})
		require.NoError(t, err)
		want, tasks := expectedUsage(tree)
		require.Equal(t, want, u.Total, "the batch's roll-up is what every task's steps reported")
		require.Equal(t, tasks, u.Tasks)
		require.Zero(t, u.Missing)
		require.Equal(t, "tenant-x", u.FairnessKey)
		require.Equal(t, history.StatusCompleted, u.Status)
		require.True(t, u.WithChildren)
		var own cairntype.UsageTotal
		own.Add(nodeUsage(0))
		require.Equal(t, own, u.Own)
		requireRollUpSums(t, u)
		require.Len(t, u.Children, len(tree.Kids))
		for i, c := range u.Children {
			kw, kt := expectedUsage(tree.Kids[i])
			require.Equal(t, kw, c.Total, "child %d", i)
			require.Equal(t, kt, c.Tasks)
			require.Equal(t, 1, c.Runs)
			alone, err := b.client.TaskUsage(ctx, c.TaskID, &sdk.TaskUsageOpts{Children: true})
			require.NoError(t, err)
			require.Equal(t, c.Total, alone.Total, "a child's line is its own roll-up")
			requireRollUpSums(t, alone)
		}

		// The same from the histories, each read whole and folded.
		var folded cairntype.UsageTotal
		var walk func(id uuid.UUID)
		walk = func(id uuid.UUID) {
			events, err := b.client.RawHistory(ctx, id)
			require.NoError(t, err)
			for _, e := range events {
				for _, x := range history.UsageOf(e.Data) {
					folded.Add(x)
				}
				if p, ok := e.Data.(history.ChildStartedData); ok {
					walk(uuid.MustParse(p.ChildID))
				}
			}
		}
		walk(run.ID)
		require.Equal(t, u.Total, folded)

		alone, err := b.client.TaskUsage(ctx, run.ID, nil)
		require.NoError(t, err)
		require.Equal(t, u.Own, alone.Total, "without children, a task's own usage")
		require.Empty(t, alone.Children)
		require.Equal(t, 1, alone.Tasks)
		_, err = b.client.TaskUsage(ctx, uuid.New(), nil)
		require.ErrorIs(t, err, sdk.ErrNotFound)

		// The namespace's series: every report in the last hours.
		byModel, err := b.client.UsageSeries(ctx, sdk.UsageQuery{By: cairntype.UsageByModel, Since: time.Now().Add(-time.Hour), Step: time.Minute})
		require.NoError(t, err)
		require.Equal(t, want.Tokens(), byModel.Total.Tokens())
		require.Equal(t, want.CostUSD, byModel.Total.CostUSD)
		require.Len(t, byModel.Keys, 2, "small and large")
		require.Equal(t, byModel.Buckets(), len(byModel.Keys[0].Points))
		for _, k := range byModel.Keys {
			var sum cairntype.UsageTotal
			for _, p := range k.Points {
				sum.Merge(p)
			}
			require.Equal(t, k.Total, sum)
			var m cairntype.ModelUsage
			for _, bm := range u.ByModel {
				if bm.Model == k.Key {
					m = bm
				}
			}
			require.Equal(t, m.UsageTotal, k.Total, "model %s", k.Key)
		}
		byType, err := b.client.UsageSeries(ctx, sdk.UsageQuery{By: cairntype.UsageByType})
		require.NoError(t, err)
		require.Len(t, byType.Keys, 1)
		require.Equal(t, "usage.node", byType.Keys[0].Key)
		require.Equal(t, want, byType.Total)
		require.Contains(t, []int{24, 25}, byType.Buckets(), "a day of hours by default, widened to whole hours")
		require.Zero(t, byType.From.UnixMicro()%time.Hour.Microseconds(), "buckets start on the hour")

		_, err = b.client.UsageSeries(ctx, sdk.UsageQuery{By: "colour"})
		require.ErrorIs(t, err, sdk.ErrInvalid)
		_, err = b.client.UsageSeries(ctx, sdk.UsageQuery{By: cairntype.UsageByModel, Step: time.Second})
		require.ErrorIs(t, err, sdk.ErrInvalid)
		_, err = b.client.UsageSeries(ctx, sdk.UsageQuery{By: cairntype.UsageByModel, Since: time.Now().Add(-40 * 24 * time.Hour)})
		require.ErrorIs(t, err, sdk.ErrInvalid)
	})
}

// usageHistories is a forest of task histories built in memory, and the
// facts a store would read of them.
type usageHistories struct {
	events  map[uuid.UUID][]history.Event
	removed map[uuid.UUID]bool // named by a history, gone from the store
}

// factsOf folds a history into what TaskUsageList reads of it.
func factsOf(id uuid.UUID, events []history.Event) store.TaskUsageFacts {
	f := store.TaskUsageFacts{ID: id, Type: "t", Status: history.StatusCompleted}
	for _, e := range events {
		f.Usage = append(f.Usage, history.UsageOf(e.Data)...)
		switch p := e.Data.(type) {
		case history.ChildStartedData:
			f.Children = append(f.Children, uuid.MustParse(p.ChildID))
		case history.TaskContinuedData:
			f.ContinuedAs = uuid.MustParse(p.NextTaskID)
		}
	}
	return f
}

func (h usageHistories) load(t *rapid.T, asked map[uuid.UUID]int) func(ctx context.Context, ids []uuid.UUID) ([]store.TaskUsageFacts, error) {
	return func(_ context.Context, ids []uuid.UUID) ([]store.TaskUsageFacts, error) {
		if len(ids) == 0 || len(ids) > store.MaxTaskUsageListIDs {
			t.Fatalf("asked for %d ids at once", len(ids))
		}
		var out []store.TaskUsageFacts
		for _, id := range ids {
			asked[id]++
			if evs, ok := h.events[id]; ok && !h.removed[id] {
				out = append(out, factsOf(id, evs))
			}
		}
		return out, nil
	}
}

// TestTaskUsageRollUpProperty: over random trees of histories (children,
// runs that continued as new, failed attempts that paid, steps without
// usage, tasks retention removed), a parent's roll-up is its own usage
// plus the sum of its children's roll-ups; it is every report of the
// tasks reachable from it, each counted once; each child's line is that
// child's own roll-up; and every task is read once.
func TestTaskUsageRollUpProperty(t *testing.T) {
	t.Parallel()
	models := []string{"small", "large", "embed"}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "tasks")
		ids := make([]uuid.UUID, n)
		for i := range ids {
			ids[i] = uuid.New()
		}
		h := usageHistories{events: map[uuid.UUID][]history.Event{}, removed: map[uuid.UUID]bool{}}
		for _, id := range ids {
			h.events[id] = []history.Event{{Seq: 1, Data: history.TaskScheduledData{TaskType: "t"}}}
		}
		add := func(id uuid.UUID, p history.Payload) {
			evs := h.events[id]
			h.events[id] = append(evs, history.Event{Seq: int64(len(evs) + 1), Data: p})
		}
		usage := func(label string) []history.Usage {
			k := rapid.IntRange(0, 3).Draw(t, label+" reports")
			out := make([]history.Usage, k)
			for i := range out {
				out[i] = history.Usage{
					Model:        rapid.SampledFrom(models).Draw(t, label+" model"),
					InputTokens:  rapid.Int64Range(0, 5000).Draw(t, label+" in"),
					OutputTokens: rapid.Int64Range(0, 5000).Draw(t, label+" out"),
					CostUSD:      float64(rapid.IntRange(0, 640).Draw(t, label+" cost")) / 64,
				}
			}
			return out
		}
		continued := map[int]bool{}
		kids := map[int]int{}
		for i := range n {
			label := fmt.Sprint("task ", i)
			for s := range rapid.IntRange(0, 3).Draw(t, label+" steps") {
				if rapid.Bool().Draw(t, label+" fails first") {
					add(ids[i], history.AttemptFailedData{Error: history.ErrorInfo{Class: history.Transient}, Usage: usage(label)})
				}
				add(ids[i], history.StepCompletedData{Position: s, Name: "s", Usage: usage(label)})
			}
			if i == 0 {
				continue
			}
			// Task i is a child of an earlier task, or the next run of an
			// earlier one that did not continue yet.
			j := rapid.IntRange(0, i-1).Draw(t, label+" parent")
			if !continued[j] && rapid.IntRange(0, 3).Draw(t, label+" continues") == 0 {
				continued[j] = true
				add(ids[j], history.TaskContinuedData{NextTaskID: ids[i].String()})
			} else {
				add(ids[j], history.ChildStartedData{Position: kids[j], ChildID: ids[i].String()})
				kids[j]++
			}
			if rapid.IntRange(0, 9).Draw(t, label+" removed") == 0 {
				h.removed[ids[i]] = true
			}
		}

		// The oracle: every report of the runs reachable from the root
		// (its children, theirs, and their next runs; not the root's own
		// next run), each once, and the runs named but removed.
		var want cairntype.UsageTotal
		reached, missing := 0, 0
		var visit func(id uuid.UUID, followRun bool)
		visit = func(id uuid.UUID, followRun bool) {
			if h.removed[id] {
				missing++
				return
			}
			reached++
			f := factsOf(id, h.events[id])
			for _, u := range f.Usage {
				want.Add(u)
			}
			for _, c := range f.Children {
				visit(c, true)
			}
			if followRun && f.ContinuedAs != uuid.Nil {
				visit(f.ContinuedAs, true)
			}
		}
		visit(ids[0], false)

		ctx := context.Background()
		asked := map[uuid.UUID]int{}
		u, err := sdk.RollUpUsage(ctx, h.load(t, asked), ids[0], true, cairntype.MaxTaskUsageTasks)
		require.NoError(t, err)
		requireRollUpSums(t, u)
		require.Equal(t, want.Tokens(), u.Total.Tokens())
		require.Equal(t, want.Reports, u.Total.Reports)
		require.Equal(t, want.CostUSD, u.Total.CostUSD, "costs in 64ths add up exactly")
		require.Equal(t, reached, u.Tasks)
		require.Equal(t, missing, u.Missing)
		for id, times := range asked {
			require.Equal(t, 1, times, "task %s read once", id)
		}
		for _, c := range u.Children {
			if h.removed[c.TaskID] || factsOf(c.TaskID, h.events[c.TaskID]).ContinuedAs != uuid.Nil {
				continue // a chain's line counts its later runs, which its first run's roll-up does not
			}
			alone, err := sdk.RollUpUsage(ctx, h.load(t, map[uuid.UUID]int{}), c.TaskID, true, cairntype.MaxTaskUsageTasks)
			require.NoError(t, err)
			require.Equal(t, c.Total, alone.Total, "child %d's line is its own roll-up", c.Position)
			require.Equal(t, c.Tasks, alone.Tasks)
		}

		own, err := sdk.RollUpUsage(ctx, h.load(t, map[uuid.UUID]int{}), ids[0], false, cairntype.MaxTaskUsageTasks)
		require.NoError(t, err)
		require.Equal(t, u.Own, own.Total)
		require.Equal(t, 1, own.Tasks)

		if len(asked) > 1 {
			_, err = sdk.RollUpUsage(ctx, h.load(t, map[uuid.UUID]int{}), ids[0], true, len(asked)-1)
			require.ErrorIs(t, err, sdk.ErrInvalid, "a tree over the limit is refused")
		}
	})
}
