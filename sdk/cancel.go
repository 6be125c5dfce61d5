package sdk

import (
	"context"

	"github.com/cairnflow/cairn/engine"
	"github.com/google/uuid"
)

// Cancel asks for the task to stop, for reason. A pending or retry-waiting
// task with nothing to compensate is cancelled at once and never runs; a
// running one stops at its next checkpoint (before its next step; an
// irreversible step in progress finishes first), and its completed
// compensable steps are compensated in reverse order before it ends
// cancelled. Cancelling a task that finished otherwise than cancelled is an
// error marked [ErrTaskState] naming its status; cancelling twice, or a
// cancelled task, is not an error and appends nothing. A cancel that arrives
// as the last step finishes can lose the race: the task then ends
// completed, with the cancel request in its history; [Client.Compensate]
// undoes it. On a task that continued as new (workflow.ContinueAsNew), the
// cancel reaches its chain's current run, which then starts no next run.
func (c *Client) Cancel(ctx context.Context, id uuid.UUID, reason string) error {
	_, err := engine.CancelTask(ctx, c.store.Engine(), &engine.TaskRequestParams{Namespace: c.namespace, ID: id, By: c.requester(ctx), Reason: reason})
	return err
}

// Compensate asks for a completed task's compensable steps to be undone,
// for reason: a worker runs their compensators in reverse order, each
// recorded, and the task ends cancelled. A task that is not completed, or
// has no step with a compensator, is an error marked [ErrTaskState].
func (c *Client) Compensate(ctx context.Context, id uuid.UUID, reason string) error {
	_, err := engine.CompensateTask(ctx, c.store.Engine(), &engine.TaskRequestParams{Namespace: c.namespace, ID: id, By: c.requester(ctx), Reason: reason})
	return err
}

// Erase destroys a finished task's data key (crypto-shredding) and
// records task_erased with who asked and why: the history keeps its
// events (types, times, attempts, errors, who did what) while every
// payload of the task (input, step outputs, output, signal payloads,
// blobs) is unreadable for good, here and in any later copy of the
// database. It needs no keys: only the task's wrapped key is destroyed.
//
// A task not yet finished is refused ([ErrTaskState]: cancel it and
// wait for it first), as is one of a namespace that was not encrypted
// when it ran ([ClientConfig.Keys]); erasing an erased task again changes
// nothing.
func (c *Client) Erase(ctx context.Context, id uuid.UUID, reason string) error {
	_, err := engine.EraseTask(ctx, c.store.Engine(), &engine.TaskEraseParams{Namespace: c.namespace, ID: id, By: c.requester(ctx), Reason: reason})
	if err == nil {
		c.store.Forget(id) // its data key, if this client's stage holds it
	}
	return err
}
