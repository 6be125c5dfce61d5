package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// writeBatch runs EventAppendMany's statement for batch on q and returns
// the ids of the tasks it wrote.
func (s *Store) writeBatch(ctx context.Context, q querier, batch *appendBatch) (map[[16]byte]bool, error) {
	rows, err := q.Query(ctx, s.sql("EventAppendMany"), batch.args(s.doneChannel, s.channel, s.cancelChannel))
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, err
	}
	written := make(map[[16]byte]bool, len(ids))
	for _, id := range ids {
		written[id] = true
	}
	return written, nil
}

// endsAChild reports whether any of the planned appends ends a child,
// whose parent must hear of it in the same transaction.
func endsAChild(ps []*store.EventAppendParams, out []store.AppendResult) bool {
	for i, p := range ps {
		if out[i].Err != nil {
			continue
		}
		if _, ok := plan.ChildReportOf(p, out[i].State); ok {
			return true
		}
	}
	return false
}

// appendReporting is EventAppendMany's statement for a batch that ends
// children, in a transaction that also writes each child's child_finished
// into its parent's log. The rows of the batch's tasks and of the parents
// are locked first, in id order, so two such batches meeting at a parent
// wait for each other rather than deadlock; the parents' histories are
// read under the lock, after the batch's own writes, and cannot move
// before the commit. It returns the ids written and the parents' appends.
// On a transaction q (a batch in rounds) its own is a savepoint.
func (s *Store) appendReporting(ctx context.Context, q txQuerier, ps []*store.EventAppendParams, out []store.AppendResult, batch *appendBatch) (map[[16]byte]bool, []parentWrite, error) {
	var ok map[[16]byte]bool
	var parents []parentWrite
	err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		ok, parents = nil, nil
		lock := make([]uuid.UUID, 0, len(ps)+1)
		for i, p := range ps {
			if out[i].Err == nil {
				lock = append(lock, p.TaskID)
			}
			if r, isChild := plan.ChildReportOf(p, out[i].State); isChild && out[i].Err == nil {
				lock = append(lock, r.Parent)
			}
		}
		locked, err := tx.Query(ctx, s.sql("TaskLockMany"), pgx.NamedArgs{"ids": lock})
		if err != nil {
			return err
		}
		lastSeqs := map[uuid.UUID]int64{}
		var id uuid.UUID
		var lastSeq int64
		if _, err := pgx.ForEachRow(locked, []any{&id, &lastSeq}, func() error {
			lastSeqs[id] = lastSeq
			return nil
		}); err != nil {
			return err
		}
		if ok, err = s.writeBatch(ctx, tx, batch); err != nil {
			return err
		}
		ids, reports := plan.ChildReports(ps, out, func(i int) bool { return out[i].Err == nil && ok[ps[i].TaskID] })
		if len(ids) == 0 {
			return nil
		}
		parents, err = s.reportToParents(ctx, tx, ids, lastSeqs, reports)
		return err
	})
	return ok, parents, err
}

// parentWrite is a parent's append of child_finished, with the state it
// replayed to.
type parentWrite struct {
	p    *store.EventAppendParams
	next history.State
}

// reportToParents appends the children's child_finished to their parents
// inside tx (whose rows it holds locked, at lastSeqs), all in one
// statement. A parent's state is the one this process has of it (see
// plan.ParentStates) brought up to date with the events since, or its
// whole history replayed.
func (s *Store) reportToParents(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, lastSeqs map[uuid.UUID]int64, reports map[uuid.UUID][]history.ChildFinishedData) ([]parentWrite, error) {
	cached := make(map[uuid.UUID]history.State, len(ids))
	afters := make([]int64, len(ids))
	for i, id := range ids {
		if st, ok := s.parents.Get(id); ok && st.LastSeq <= lastSeqs[id] {
			cached[id], afters[i] = st, st.LastSeq
		}
	}
	since, err := s.eventsQuery(ctx, tx, s.sql("EventListAfter"), pgx.NamedArgs{"ids": ids, "afters": afters})
	if err != nil {
		return nil, err
	}
	var out []parentWrite
	batch := newAppendBatch(len(ids))
	now := s.now()
	for _, id := range ids {
		if _, locked := lastSeqs[id]; !locked {
			continue // the parent is gone (retention): nobody to tell
		}
		st, ok := cached[id]
		state, err := plan.CatchUp(st, ok, since[id])
		if err != nil && ok {
			// The cached state does not lead to the database's history
			// (a database restored or failed over to an older copy):
			// forget it and replay the history whole.
			s.parents.Forget(id)
			var all map[uuid.UUID][]history.Event
			if all, err = s.eventsQuery(ctx, tx, s.sql("EventListByTask"), pgx.NamedArgs{"task_id": id}); err == nil {
				state, err = history.Replay(all[id])
			}
		}
		if err != nil {
			return nil, errors.Wrapf(err, "replay parent %s", id)
		}
		ap := plan.ParentAppend(id, state, reports[id])
		if ap == nil {
			continue
		}
		next, err := batch.add(ap, now, s.limits)
		if err != nil {
			return nil, errors.Wrapf(err, "report to parent %s", id)
		}
		out = append(out, parentWrite{p: ap, next: next})
	}
	if len(out) == 0 {
		return nil, nil
	}
	written, err := s.writeBatch(ctx, tx, batch)
	if err != nil {
		return nil, err
	}
	if len(written) != len(out) {
		// The rows are locked and the histories read under the lock:
		// nothing can have moved.
		return nil, errors.AssertionFailedf("report to %d parents: %d written", len(out), len(written))
	}
	return out, nil
}

// rememberParents caches the parents' states once their appends have
// committed (in a transaction, at its commit).
func (s *Store) rememberParents(parents []parentWrite) {
	if len(parents) == 0 {
		return
	}
	s.afterCommit(func() {
		for _, w := range parents {
			s.parents.Put(w.p.TaskID, w.next)
		}
	})
}
