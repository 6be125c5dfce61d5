package sdk

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/internal/errmark"
)

// Run is a handle on one task of a workflow whose output is Out: what
// [Start] returns, and [RunOf] makes for a known id. It holds no
// connection; its methods ask the client's store.
type Run[Out any] struct {
	// ID is the task's id.
	ID uuid.UUID
	// Existing is true when the start's idempotency key was already used:
	// ID is the task that used it, and nothing was created.
	Existing bool

	client   *Client
	typeName string // the workflow type the task must be of
}

// Start persists a task of wf with input in, and returns a handle on it
// once it is committed. It is the typed start: in must be wf's input type,
// so a mistyped input does not compile. Inputs and options are checked as
// [Client.StartDynamic] checks them ([ErrInvalid]); opts nil takes every
// default.
func Start[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], in In, opts *StartOpts) (*Run[Out], error) {
	res, err := c.StartDynamic(ctx, wf, in, opts)
	if err != nil {
		return nil, err
	}
	return newRun[Out](c, wf, res), nil
}

// StartTx is [Start] inside the caller's transaction (the outbox pattern):
// the task exists, and workers hear of it, only if tx commits. It needs the
// PostgreSQL store (see [Client.StartDynamicTx]).
func StartTx[In, Out any](ctx context.Context, c *Client, tx pgx.Tx, wf *Workflow[In, Out], in In, opts *StartOpts) (*Run[Out], error) {
	res, err := c.StartDynamicTx(ctx, tx, wf, in, opts)
	if err != nil {
		return nil, err
	}
	return newRun[Out](c, wf, res), nil
}

// StartEntry is one typed start of a [Client.StartMany]: in must be wf's
// input type; opts nil takes every default. The entry holds a copy of
// *opts. [RunOf] makes a handle on each result.
func StartEntry[In, Out any](wf *Workflow[In, Out], in In, opts *StartOpts) StartParams {
	return StartParams{Workflow: wf, Input: in, Opts: orZero(opts)}
}

// RunOf is a handle on the task id of wf, started earlier (by an id kept
// from a [Run], a [Client.StartMany], a listing). It does not touch the
// store: a task that is missing, or of another workflow type, is an error
// of the handle's methods.
func RunOf[In, Out any](c *Client, wf *Workflow[In, Out], id uuid.UUID) *Run[Out] {
	return &Run[Out]{ID: id, client: c, typeName: wf.TypeName()}
}

func newRun[Out any](c *Client, wf WorkflowRef, res StartResult) *Run[Out] {
	return &Run[Out]{ID: res.ID, Existing: res.Existing, client: c, typeName: wf.TypeName()}
}

// Info returns the task's current state, as [Client.Get] does. A task not
// in the client's namespace is [ErrNotFound]; one of another workflow type
// than the handle's is [ErrInvalid].
func (r *Run[Out]) Info(ctx context.Context) (*TaskInfo, error) {
	info, err := r.client.Get(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	return info, r.checkType(info)
}

// Result waits until the task is finished (as [Client.Wait] does) and
// returns its output. A task that ended other than completed is a
// [*TaskError] carrying its status and last error; errors.Is matches
// [ErrFailed], [ErrDeadLettered], [ErrCancelled] or [ErrExpired], with the
// standard library as with cockroachdb. ctx ending first returns ctx's
// error; a missing task is [ErrNotFound].
func (r *Run[Out]) Result(ctx context.Context) (Out, error) {
	var zero Out
	info, err := r.client.Wait(ctx, r.ID)
	if err != nil {
		return zero, err
	}
	if err := r.checkType(info); err != nil {
		return zero, err
	}
	return Output[Out](info)
}

// checkType refuses a task of another workflow type than the handle's: its
// output would not be an Out.
func (r *Run[Out]) checkType(info *TaskInfo) error {
	if info.Type != r.typeName {
		return errmark.Mark(errors.Newf("task %s is of workflow type %s, not %s", r.ID, info.Type, r.typeName), ErrInvalid)
	}
	return nil
}
