package sqlitestore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskStartChildren implements [store.Store]: the children's starts and
// the parent's fenced child_started, in one transaction, as PostgreSQL's.
func (s *Store) TaskStartChildren(ctx context.Context, p *store.ChildStartParams) (store.ChildStartResult, error) {
	starts, err := plan.ChildStarts(p)
	if err != nil {
		return store.ChildStartResult{}, err
	}
	var res store.ChildStartResult
	var ap *store.EventAppendParams
	var note store.Notification
	err = s.tx(ctx, func(tx *txn) error {
		note = store.Notification{Ready: true}
		now := s.now()
		planned, err := planStarts(starts, now, "start child")
		if err != nil {
			return err
		}
		started, err := startPlanned(ctx, tx, planned, now)
		if err != nil {
			return err
		}
		var ids []uuid.UUID
		ap, ids = plan.ChildStartedAppend(p, started)
		w := &appendWriter{tx: tx, now: now, note: &note, limited: queueLimits{}, limits: s.limits}
		next, err := w.appendOne(ctx, ap)
		if err != nil {
			return err
		}
		res = store.ChildStartResult{State: next, IDs: ids}
		return nil
	})
	if err != nil {
		return store.ChildStartResult{State: p.Parent.State}, errors.Wrapf(err, "start children of task %s", p.Parent.TaskID)
	}
	if s.metrics != nil {
		s.metrics.ObserveAppended(ap, res.State)
	}
	s.announce(note)
	return res, nil
}
