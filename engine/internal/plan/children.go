package plan

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// ChildKey is the idempotency key of a parent's child at position: a
// retried parent, replaying to the same position, finds the child it
// started rather than starting another.
func ChildKey(parent uuid.UUID, position int) string {
	return fmt.Sprintf("cairn:child:%s:%d", parent, position)
}

// ChildStarts checks p and returns its children's starts, each naming its
// parent and position and carrying the key [ChildKey] derives: what both
// drivers insert before they append the parent's child_started events.
func ChildStarts(p *store.ChildStartParams) ([]*store.TaskStartParams, error) {
	parent := p.Parent
	switch {
	case len(p.Children) == 0:
		return nil, errors.AssertionFailedf("start children of task %s: none", parent.TaskID)
	case len(parent.Payloads) != 0:
		return nil, errors.AssertionFailedf("start children of task %s: the parent's payloads are the store's to write", parent.TaskID)
	case parent.Epoch == 0:
		return nil, errors.AssertionFailedf("start children of task %s: not fenced by an attempt's lease", parent.TaskID)
	}
	out := make([]*store.TaskStartParams, len(p.Children))
	for i, c := range p.Children {
		if c.Task.Namespace != parent.State.Scheduled.Namespace {
			return nil, errors.Newf("start child %d of task %s: namespace %q, the parent's is %q",
				i, parent.TaskID, c.Task.Namespace, parent.State.Scheduled.Namespace)
		}
		if c.OnParentClose != "" && c.OnParentClose != history.ParentCloseCancel && c.OnParentClose != history.ParentCloseAbandon {
			return nil, errors.Newf("start child %d of task %s: unknown parent close policy %q", i, parent.TaskID, c.OnParentClose)
		}
		start := c.Task
		pos := len(parent.State.Children) + i
		start.Scheduled.ParentID, start.Scheduled.ParentPosition = parent.TaskID.String(), pos
		start.Scheduled.IdempotencyKey = ChildKey(parent.TaskID, pos)
		start.RefuseKeyReuse = false
		out[i] = &start
	}
	return out, nil
}

// ChildStartedAppend is the parent's append of child_started for children
// started as started (in the order of p.Children), and the children's ids.
func ChildStartedAppend(p *store.ChildStartParams, started []store.TaskStartResult) (*store.EventAppendParams, []uuid.UUID) {
	ids := make([]uuid.UUID, len(started))
	for i, st := range started {
		ids[i] = st.ID
	}
	ap := p.Parent
	ap.Payloads = make([]history.Payload, len(p.Children))
	for i, c := range p.Children {
		ap.Payloads[i] = history.ChildStartedData{
			Position: len(p.Parent.State.Children) + i, ChildID: ids[i].String(),
			TaskType: c.Task.Scheduled.TaskType, TypeVersion: c.Task.Scheduled.TypeVersion, OnParentClose: c.OnParentClose,
		}
	}
	return &ap, ids
}

// ChildReport is what a child's terminal append reports to its parent.
type ChildReport struct {
	Parent   uuid.UUID
	Finished history.ChildFinishedData
}

// ChildReportOf returns the report of append p, which took its task from
// p.State to next, when it ended a child (ok).
func ChildReportOf(p *store.EventAppendParams, next history.State) (ChildReport, bool) {
	sc := next.Scheduled
	if sc.ParentID == "" || !next.Status.Terminal() || p.State.Status.Terminal() {
		return ChildReport{}, false
	}
	if next.Status == history.StatusContinued {
		// The child goes on in its next run: the chain's last run
		// reports.
		return ChildReport{}, false
	}
	parent, err := uuid.Parse(sc.ParentID)
	if err != nil {
		return ChildReport{}, false // Replay accepted it; a start made by cairn names a parsed id
	}
	fin := history.ChildFinishedData{Position: sc.ParentPosition, ChildID: p.TaskID.String(), Status: next.Status}
	if next.Status == history.StatusCompleted {
		fin.Output = next.Output
	} else if next.LastError != nil {
		info := *next.LastError
		fin.Error = &info
	}
	return ChildReport{Parent: parent, Finished: fin}, true
}

// ChildReports collects the reports of the appends in ps that were
// written (written(i); out[i] their results) and ended a child, by
// parent, parents in id order (the order their rows are locked in).
func ChildReports(ps []*store.EventAppendParams, out []store.AppendResult, written func(i int) bool) ([]uuid.UUID, map[uuid.UUID][]history.ChildFinishedData) {
	var parents []uuid.UUID
	var by map[uuid.UUID][]history.ChildFinishedData
	for i, p := range ps {
		if !written(i) {
			continue
		}
		r, ok := ChildReportOf(p, out[i].State)
		if !ok {
			continue
		}
		if by == nil {
			by = map[uuid.UUID][]history.ChildFinishedData{}
		}
		if _, seen := by[r.Parent]; !seen {
			parents = append(parents, r.Parent)
		}
		by[r.Parent] = append(by[r.Parent], r.Finished)
	}
	slices.SortFunc(parents, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return parents, by
}

// ParentAppend is the append of reports into the log of parent, in state:
// the reports it can take, in position order (none when it has finished;
// none for a child whose outcome it has, a requeued child's second end).
// nil when nothing is left to write.
func ParentAppend(parent uuid.UUID, state history.State, reports []history.ChildFinishedData) *store.EventAppendParams {
	if state.Status.Terminal() {
		return nil
	}
	slices.SortFunc(reports, func(a, b history.ChildFinishedData) int { return a.Position - b.Position })
	var payloads []history.Payload
	for _, r := range reports {
		if r.Position < 0 || r.Position >= len(state.Children) {
			continue
		}
		c := state.Children[r.Position]
		if c.Finished {
			continue
		}
		if c.ID != r.ChildID {
			// The last run of a child that continued as new: only the
			// child and the runs it continued as name the parent at its
			// position (a squatter of the child's key is refused), and
			// the parent knows the child by its first run's id.
			r.ChildID, r.RunID = c.ID, r.ChildID
		}
		payloads = append(payloads, r)
	}
	if len(payloads) == 0 {
		return nil
	}
	return &store.EventAppendParams{TaskID: parent, State: state, Payloads: payloads}
}

// ParentStates keeps the states of parents whose children end in this
// process, so a child's end reads only the events its parent gained since
// the last one instead of the parent's whole history: a fan-in of n
// children then reads O(n) events in all, not O(n²). States are values
// the history package copies on write, so a cached one is never changed
// under a reader. It is bounded: past maxParentStates it starts afresh.
type ParentStates struct {
	mu sync.Mutex
	m  map[uuid.UUID]history.State
}

// maxParentStates bounds the cache: a state holds every child's output.
const maxParentStates = 1024

// Get returns the cached state of parent, if any.
func (c *ParentStates) Get(parent uuid.UUID) (history.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[parent]
	return st, ok
}

// Put caches state as parent's (a finished parent is dropped: nothing
// more is reported to it).
func (c *ParentStates) Put(parent uuid.UUID, state history.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if state.Status.Terminal() {
		delete(c.m, parent)
		return
	}
	if c.m == nil || len(c.m) >= maxParentStates {
		c.m = make(map[uuid.UUID]history.State)
	}
	c.m[parent] = state
}

// Forget drops parent's cached state.
func (c *ParentStates) Forget(parent uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, parent)
}

// CatchUp returns parent's state at lastSeq from cached (ok: a state
// Get returned, at a seq not past lastSeq) and the events after it
// (since), or, with no usable cache, by replaying since whole.
func CatchUp(cached history.State, ok bool, since []history.Event) (history.State, error) {
	if !ok {
		return history.Replay(since)
	}
	return history.ApplyAll(cached, since)
}
