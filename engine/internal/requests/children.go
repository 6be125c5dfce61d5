package requests

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

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
