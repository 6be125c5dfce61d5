package requests

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// ContinueAsNew continues a running task as new (see
// [store.ContinueParams]) over ex, a store or a transaction of one: in one
// transaction (on a Tx, a nested one), the next run's start (TaskStart)
// and the ending run's task_continued naming it, appended after
// p.Run.Payloads and fenced by the run's lease (EventAppend). An append
// refused (ErrFenced, ErrConflict: a cancel request or a signal came
// first, ...) rolls the start back: nothing is written, the error is
// marked as EventAppend's, and State is the run's as given.
func ContinueAsNew(ctx context.Context, ex store.Executor, p *store.ContinueParams) (store.ContinueResult, error) {
	if err := checkContinue(p); err != nil {
		return store.ContinueResult{State: p.Run.State}, err
	}
	res, err := continueAsNew(ctx, ex, p)
	if err != nil {
		return store.ContinueResult{State: p.Run.State}, errors.Wrapf(err, "continue task %s as new", p.Run.TaskID)
	}
	return res, nil
}

// checkContinue refuses a continue that would break the chain: the next
// run is the same workflow, in the same namespace, names the run it
// continues, and holds no idempotency key.
func checkContinue(p *store.ContinueParams) error {
	run, next := p.Run, p.Next.Scheduled
	sc := run.State.Scheduled
	switch {
	case run.Epoch == 0:
		return errors.AssertionFailedf("continue task %s: not fenced by an attempt's lease", run.TaskID)
	case p.Next.Namespace != sc.Namespace:
		return errors.AssertionFailedf("continue task %s: next run in namespace %q, the run's is %q", run.TaskID, p.Next.Namespace, sc.Namespace)
	case next.TaskType != sc.TaskType || next.TypeVersion != sc.TypeVersion:
		return errors.AssertionFailedf("continue task %s: next run of %s v%d, the run is %s v%d", run.TaskID, next.TaskType, next.TypeVersion, sc.TaskType, sc.TypeVersion)
	case next.ContinuedFrom != run.TaskID.String():
		return errors.AssertionFailedf("continue task %s: next run continues %q", run.TaskID, next.ContinuedFrom)
	case next.IdempotencyKey != "":
		return errors.AssertionFailedf("continue task %s: next run has an idempotency key (the chain's first run keeps it)", run.TaskID)
	}
	return nil
}

func continueAsNew(ctx context.Context, ex store.Executor, p *store.ContinueParams) (store.ContinueResult, error) {
	tx, err := ex.Begin(ctx)
	if err != nil {
		return store.ContinueResult{}, err
	}
	// A no-op after the commit; on the way out of a refusal it must roll
	// back even when ctx has ended.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	started, err := tx.TaskStart(ctx, &p.Next)
	if err != nil {
		return store.ContinueResult{}, err
	}
	if started.Existing {
		return store.ContinueResult{}, errors.AssertionFailedf("next run %s exists already", started.ID)
	}
	ap := p.Run
	ap.Payloads = append(slices.Clip(p.Run.Payloads), history.TaskContinuedData{NextTaskID: started.ID.String()})
	next, err := tx.EventAppend(ctx, &ap)
	if err != nil {
		return store.ContinueResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return store.ContinueResult{}, err
	}
	return store.ContinueResult{State: next, NextID: started.ID}, nil
}
