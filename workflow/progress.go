package workflow

import (
	"encoding/json"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// Progress writes how far the workflow has come (done of total, 0: not
// known, with a message) to the task's activities.ProgressStream, as
// activities.Progress does from a step: readers of the task's streams
// see it at once. It is written only when the workflow runs past what
// its history records: a replay of the same code does not write it
// again (an attempt that crashed before its next step was recorded may
// have written it once already). Its error is the stream writer's (a
// limit, a lost lease); the workflow may ignore it.
func Progress(ctx Context, done, total int, message string) error {
	data, err := json.Marshal(activities.ProgressData{Done: done, Total: total, Message: message})
	if err != nil {
		return errors.Wrap(err, "progress: encode")
	}
	return interpreter.Progress(ctx, activities.ProgressStream, data)
}
