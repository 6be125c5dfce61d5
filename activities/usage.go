package activities

import (
	"context"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
)

// Usage is what a step spent on one AI model: tokens in and out, and their
// cost in US dollars. It is the history's type, so what a step reports is
// what its step_completed (or attempt_failed) records.
type Usage = history.Usage

// RecordUsage adds u to the usage of the step running under ctx. Calls add
// up per model, so a step that calls a model three times may report each
// call. The total is recorded with the step's step_completed event, or with
// attempt_failed if the step fails (a failed call is paid for too), and
// counted in the worker's metrics.
//
// Outside a step it does nothing. A negative or non-finite figure counts as
// zero: it cannot be stored, and a cost or count never goes down.
func RecordUsage(ctx context.Context, u Usage) { activity.RecordUsage(ctx, u) }
