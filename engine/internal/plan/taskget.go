package plan

import (
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// CheckTaskGet checks that p names one task, by id or by idempotency key
// (not both), and says which: byID is true for the id. Neither names no
// task, which is not found, as the zero id is.
func CheckTaskGet(p *store.TaskGetParams) (byID bool, err error) {
	switch {
	case p.ID != uuid.Nil && p.IdempotencyKey != "":
		return false, errors.New("get a task: give its id or its idempotency key, not both")
	case p.ID == uuid.Nil && p.IdempotencyKey == "":
		return false, errmark.Mark(errors.Newf("get task %s: no task has the zero id", p.ID), store.ErrNotFound)
	}
	return p.ID != uuid.Nil, nil
}

// TaskGetError wraps err, a driver's TaskGet's (interpreted: a task not
// found is marked store.ErrNotFound), with what it looked for.
func TaskGetError(err error, p *store.TaskGetParams) error {
	if p.ID != uuid.Nil {
		return errors.Wrapf(err, "get task %s", p.ID)
	}
	return errors.Wrapf(err, "find the task holding idempotency key %q", p.IdempotencyKey)
}
