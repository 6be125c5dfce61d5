package activities

import (
	"context"

	"github.com/cairnflow/cairn/internal/activity"
)

// Info describes the step an activity context belongs to: TaskID,
// TaskType, Attempt (from 1), WorkerID, Step (its name) and Position, the
// step's IdempotencyKey ("<task id>/<position>/<name>", the same on every
// attempt of this step of this task: hand it to external APIs so a retried
// step has its effect once), and TraceID (the trace the task was started
// under, as given at submission; empty when none). It is an alias of the
// type the worker fills in when it starts the step.
type Info = activity.Info

// GetInfo returns the step info carried by ctx, and false if ctx is not an
// activity context.
func GetInfo(ctx context.Context) (Info, bool) { return activity.GetInfo(ctx) }

// Heartbeat tells the worker that the step running under ctx is alive.
// Call it from long-running steps at least once per heartbeat timeout
// (workflow.StepOpts.HeartbeatTimeout). It does nothing outside a step with
// a heartbeat timeout.
func Heartbeat(ctx context.Context) { activity.Heartbeat(ctx) }
