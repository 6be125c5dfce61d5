package sdk

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskUsageOpts are the options of [Client.TaskUsage]; nil is the zero
// value.
type TaskUsageOpts struct {
	// Children rolls the task's children up with it, recursively (a
	// batch's cost): the children its history started (StartChild,
	// MapChildren, MapChunks), theirs, and every run of a child that
	// continued as new. At most [cairntype.MaxTaskUsageTasks] task runs
	// are read; a larger tree is refused (ErrInvalid), and its children
	// can be asked for one by one.
	Children bool
}

// TaskUsage returns what task id spent on AI models, from its history
// alone: the usage its steps reported (activities.RecordUsage) on
// step_completed and on attempt_failed (a failed call is paid for too),
// in total and by model. A fork's copied steps count nothing: the task
// forked from paid for them. With opts.Children the task's descendants
// are rolled up with it and each direct child is listed with its own
// roll-up, so the parent's Total is its Own plus the sum of its
// children's Totals.
//
// The task id asked about counts its own run; a run it continued as is
// another task to ask about. Tasks retention removed are not counted
// (Missing says how many a roll-up lacks); their archives are not read.
// A task not in the client's namespace is ErrNotFound.
func (c *Client) TaskUsage(ctx context.Context, id uuid.UUID, opts *TaskUsageOpts) (*cairntype.TaskUsage, error) {
	var o TaskUsageOpts
	if opts != nil {
		o = *opts
	}
	load := func(ctx context.Context, ids []uuid.UUID) ([]store.TaskUsageFacts, error) {
		return c.store.TaskUsageList(ctx, &store.TaskUsageListParams{Namespace: c.namespace, IDs: ids})
	}
	return rollUpUsage(ctx, load, id, o.Children, cairntype.MaxTaskUsageTasks)
}

// usageLoader reads the usage facts of ids (at most
// store.MaxTaskUsageListIDs); those it does not find are left out.
type usageLoader func(ctx context.Context, ids []uuid.UUID) ([]store.TaskUsageFacts, error)

// usageSum is a total with its models.
type usageSum struct {
	total  cairntype.UsageTotal
	models map[string]cairntype.UsageTotal
}

func (s *usageSum) add(us []history.Usage) {
	for _, u := range us {
		s.total.Add(u)
		m := s.models[u.Model]
		m.Add(u)
		s.models[u.Model] = m
	}
}

func (s *usageSum) merge(o usageSum) {
	s.total.Merge(o.total)
	for name, m := range o.models {
		mine := s.models[name]
		mine.Merge(m)
		s.models[name] = mine
	}
}

func newUsageSum() usageSum { return usageSum{models: map[string]cairntype.UsageTotal{}} }

func (s usageSum) byModel() []cairntype.ModelUsage {
	out := make([]cairntype.ModelUsage, 0, len(s.models))
	for name, m := range s.models {
		out = append(out, cairntype.ModelUsage{Model: name, UsageTotal: m})
	}
	slices.SortFunc(out, func(a, b cairntype.ModelUsage) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// rollUpUsage composes the roll-up of task id from the facts load reads:
// the task alone, or with its descendants (read level by level, at most
// limit runs).
func rollUpUsage(ctx context.Context, load usageLoader, id uuid.UUID, children bool, limit int) (*cairntype.TaskUsage, error) {
	root, err := load(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, errors.Wrapf(err, "usage of task %s", id)
	}
	if len(root) != 1 || root[0].ID != id {
		return nil, errmark.Mark(errors.Newf("usage of task %s: not found", id), ErrNotFound)
	}
	facts := map[uuid.UUID]*store.TaskUsageFacts{id: &root[0]}
	own := newUsageSum()
	own.add(root[0].Usage)
	out := &cairntype.TaskUsage{
		TaskID: id, Type: root[0].Type, FairnessKey: root[0].FairnessKey, Status: root[0].Status,
		Own: own.total, OwnByModel: own.byModel(), Total: own.total, ByModel: own.byModel(), Tasks: 1,
		WithChildren: children,
	}
	if !children {
		return out, nil
	}
	if err := loadDescendants(ctx, load, facts, root[0].Children, limit); err != nil {
		return nil, errors.Wrapf(err, "usage of task %s", id)
	}
	r := usageRoller{facts: facts, seen: map[uuid.UUID]bool{id: true}}
	total := own
	total.models = maps.Clone(own.models)
	for pos, child := range root[0].Children {
		sum, c := r.chain(child)
		c.Position = pos
		out.Children = append(out.Children, c)
		total.merge(sum)
		out.Tasks += c.Tasks
		out.Missing += c.Missing
	}
	out.Total, out.ByModel = total.total, total.byModel()
	return out, nil
}

// loadDescendants reads the facts of ids, their children and the runs
// they continued as, level by level, into facts.
func loadDescendants(ctx context.Context, load usageLoader, facts map[uuid.UUID]*store.TaskUsageFacts, ids []uuid.UUID, limit int) error {
	next := slices.Clone(ids)
	for len(next) > 0 {
		var level []uuid.UUID
		for _, id := range next {
			if _, ok := facts[id]; !ok {
				facts[id] = nil // asked for; nil until (unless) read
				level = append(level, id)
			}
		}
		if len(facts) > limit {
			return errmark.Mark(errors.Newf("over %d task runs under it; ask without children, or for its children one by one", limit), ErrInvalid)
		}
		next = next[:0]
		for chunk := range slices.Chunk(level, store.MaxTaskUsageListIDs) {
			got, err := load(ctx, chunk)
			if err != nil {
				return err
			}
			for i := range got {
				f := &got[i]
				facts[f.ID] = f
				next = append(next, f.Children...)
				if f.ContinuedAs != uuid.Nil {
					next = append(next, f.ContinuedAs)
				}
			}
		}
	}
	return nil
}

// usageRoller sums the loaded facts bottom up.
type usageRoller struct {
	facts map[uuid.UUID]*store.TaskUsageFacts
	seen  map[uuid.UUID]bool // runs summed, so no run counts twice
}

// chain rolls up the child started as id: every run of its chain, each
// with its own children's chains.
func (r *usageRoller) chain(id uuid.UUID) (usageSum, cairntype.ChildUsage) {
	sum := newUsageSum()
	c := cairntype.ChildUsage{TaskID: id}
	for run := id; run != uuid.Nil; {
		f := r.facts[run]
		if f == nil || r.seen[run] {
			c.Missing++
			break
		}
		r.seen[run] = true
		c.Runs++
		if c.Type == "" {
			c.Type = f.Type
		}
		c.Status = f.Status
		sum.add(f.Usage)
		c.Tasks++
		for _, child := range f.Children {
			s, cc := r.chain(child)
			sum.merge(s)
			c.Tasks += cc.Tasks
			c.Missing += cc.Missing
		}
		run = f.ContinuedAs
	}
	c.Total = sum.total
	return sum, c
}

// UsageQuery asks [Client.UsageSeries] for the namespace's usage over
// time.
type UsageQuery struct {
	// By is the breakdown: cairntype.UsageByFairnessKey (the tenant),
	// UsageByModel or UsageByType. Required.
	By cairntype.UsageBy
	// Since and Until bound the window (zero Until: now; zero Since:
	// Until less [cairntype.DefaultUsageWindow]), widened to whole
	// steps aligned to the Unix epoch in UTC. Step is each bucket's
	// length (zero: [cairntype.DefaultUsageStep]), from
	// [cairntype.MinUsageStep]; at most [cairntype.MaxUsageBuckets]
	// buckets over at most [cairntype.MaxUsageWindow].
	Since, Until time.Time
	Step         time.Duration
}

// UsageSeries returns the usage the namespace's steps reported over a
// window, broken down by q.By, in buckets of q.Step: from the histories
// alone (step_completed and attempt_failed, by the time of the event),
// the tasks retention removed left out. At most [cairntype.MaxUsageKeys]
// keys, by cost; the rest are summed into one. Bad arguments are
// ErrInvalid; a window whose reading takes over the bound of a diagnosis
// (30 s) is refused marked ErrDiagnosisTooSlow.
func (c *Client) UsageSeries(ctx context.Context, q UsageQuery) (*cairntype.UsageSeries, error) {
	by, err := cairntype.ParseUsageBy(string(q.By))
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	step := q.Step
	if step == 0 {
		step = cairntype.DefaultUsageStep
	}
	from, until, buckets, err := cairntype.UsageWindow(q.Since, q.Until, step, time.Now())
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	p := &store.UsageSeriesParams{Namespace: c.namespace, By: by, From: from, Until: until, Step: step}
	if err := p.Validate(); err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	cells, err := c.store.UsageSeries(ctx, p)
	if err != nil {
		return nil, err
	}
	s := cairntype.FoldUsageSeries(by, from, step, buckets, cells)
	return &s, nil
}
