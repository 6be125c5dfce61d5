package requests

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// CloseChildren requests the cancel of the unfinished children of task
// parent, in state, whose policy is cancel: what a parent's end does
// first, whoever writes it (its worker, or the rescuer).
func CloseChildren(ctx context.Context, s store.Store, namespace string, parent uuid.UUID, state history.State, reason string) error {
	for _, c := range state.Children {
		if !toClose(c) {
			continue
		}
		id, err := uuid.Parse(c.ID)
		if err != nil {
			return errors.Wrapf(err, "child %d", c.Position)
		}
		_, err = Cancel(ctx, s, &Params{
			Namespace: namespace, ID: id, By: "parent " + parent.String(),
			Reason: fmt.Sprintf("parent %s %s", parent, reason),
		})
		if errors.Is(err, store.ErrTaskState) || errors.Is(err, store.ErrNotFound) {
			continue // it finished (or was removed) first
		}
		if err != nil {
			return errors.Wrapf(err, "cancel child %d (task %s)", c.Position, id)
		}
	}
	return nil
}

// StartChildren starts children of a running parent (see
// [store.ChildStartParams]) over ex, a store or a transaction of one: in
// one transaction (on a Tx, a nested one), the children's starts
// (TaskStartMany: one statement for the batch, with their idempotency
// keys and their bounded queues' checks; a child the parent started
// before, at the same position, is found by its key and not started
// again) and the parent's child_started events (EventAppend, fenced by
// its attempt's lease). An append refused as EventAppend refuses it
// (ErrFenced, ErrConflict, ...) rolls the children back: then nothing is
// written, the error is marked as EventAppend's, and State is the
// parent's as given. A child's terminal append reports to its parent in
// the drivers' append itself.
func StartChildren(ctx context.Context, ex store.Executor, p *store.ChildStartParams) (store.ChildStartResult, error) {
	starts, err := plan.ChildStarts(p)
	if err != nil {
		return store.ChildStartResult{}, err
	}
	res, err := startChildren(ctx, ex, p, starts)
	if err != nil {
		return store.ChildStartResult{State: p.Parent.State}, errors.Wrapf(err, "start children of task %s", p.Parent.TaskID)
	}
	return res, nil
}

// startChildren writes starts, p's children, and the parent's
// child_started in one transaction of ex.
func startChildren(ctx context.Context, ex store.Executor, p *store.ChildStartParams, starts []*store.TaskStartParams) (store.ChildStartResult, error) {
	tx, err := ex.Begin(ctx)
	if err != nil {
		return store.ChildStartResult{}, err
	}
	// A no-op after the commit; on the way out of a refusal it must roll
	// back even when ctx has ended.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	started, err := tx.TaskStartMany(ctx, starts)
	if err != nil {
		return store.ChildStartResult{}, err
	}
	ap, ids := plan.ChildStartedAppend(p, started)
	next, err := tx.EventAppend(ctx, ap)
	if err != nil {
		return store.ChildStartResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return store.ChildStartResult{}, err
	}
	return store.ChildStartResult{State: next, IDs: ids}, nil
}
