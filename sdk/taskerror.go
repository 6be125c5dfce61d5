package sdk

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// The ends of a task other than completed, as [Run.Result] and [Output]
// report them: a [*TaskError] wraps the one of its status, so that
// errors.Is(err, sdk.ErrDeadLettered) holds, with the standard library's
// errors.Is as with cockroachdb's. They are named after the statuses
// (history.StatusFailed, ...).
var (
	// ErrFailed: the task failed permanently and was not dead-lettered
	// (its workflow has SkipDeadLetter), or its compensation ended it.
	ErrFailed = errors.New("task failed")
	// ErrDeadLettered: the task failed permanently or used up its retry
	// budget, and waits in the dead letters for [Client.Retry].
	ErrDeadLettered = errors.New("task dead-lettered")
	// ErrCancelled: the task was cancelled ([Client.Cancel]).
	ErrCancelled = errors.New("task cancelled")
	// ErrExpired: the task was not started by its StartOpts.StartDeadline
	// and never ran.
	ErrExpired = errors.New("task expired")
)

// statusErrors maps each terminal status but completed to its sentinel.
var statusErrors = map[history.Status]error{
	history.StatusFailed:       ErrFailed,
	history.StatusDeadLettered: ErrDeadLettered,
	history.StatusCancelled:    ErrCancelled,
	history.StatusExpired:      ErrExpired,
}

// TaskError is how a task that did not complete ends a [Run.Result]: its
// terminal status and the evidence of its last error, as the history
// recorded it (TaskInfo.LastError). Get it with errors.As; errors.Is
// matches the status's sentinel ([ErrFailed], [ErrDeadLettered],
// [ErrCancelled], [ErrExpired]).
type TaskError struct {
	TaskID uuid.UUID
	Status history.Status
	// Attempt is the number of attempts the task started.
	Attempt int
	// Class, Kind, Message and Step are those of the last error recorded
	// (history.ErrorInfo): how it was classified, its kind ("timeout",
	// "bad_input", ...), its text, and the step that failed, if a step
	// did. They are empty when no error was recorded: a task cancelled or
	// expired before it failed.
	Class   history.Class
	Kind    string
	Message string
	Step    string
	// LastError is the whole record of the last error (ClassifiedBy,
	// Attrs, ...); nil when none was recorded.
	LastError *history.ErrorInfo
}

// newTaskError is the error of a task that ended other than completed.
func newTaskError(info *TaskInfo) *TaskError {
	e := &TaskError{TaskID: info.ID, Status: info.Status, Attempt: info.Attempt, LastError: info.LastError}
	if le := info.LastError; le != nil {
		e.Class, e.Kind, e.Message, e.Step = le.Class, le.Kind, le.Message, le.Step
	}
	return e
}

// Error says how the task ended and, when one was recorded, with what
// error: "task 0190… dead_lettered after 3 attempts: step "charge":
// transient error (http): card declined".
func (e *TaskError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %s %s", e.TaskID, e.Status)
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " after %d attempt%s", e.Attempt, plural(e.Attempt))
	}
	if e.LastError == nil {
		return b.String()
	}
	b.WriteString(": ")
	if e.Step != "" {
		fmt.Fprintf(&b, "step %q: ", e.Step)
	}
	if e.Class != "" {
		fmt.Fprintf(&b, "%s error", e.Class)
		if e.Kind != "" {
			fmt.Fprintf(&b, " (%s)", e.Kind)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Unwrap returns the sentinel of the task's status, for errors.Is.
func (e *TaskError) Unwrap() error { return statusErrors[e.Status] }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
