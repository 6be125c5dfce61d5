package activity

import (
	"context"
	"fmt"
)

// Info describes the step an activity context belongs to. Step authors
// read it as activities.Info (an alias) through activities.GetInfo; the
// executor puts it into every step's context with [WithInfo].
type Info struct {
	TaskID   string
	TaskType string
	Attempt  int
	WorkerID string
	Step     string
	Position int
	// IdempotencyKey is the same on every attempt of this step of this
	// task: hand it to external APIs so a retried step has its effect once.
	IdempotencyKey string
	// TraceID is the trace the task was started under, as given at
	// submission (a W3C traceparent or a trace id); empty when none.
	TraceID string
}

// IdempotencyKey returns the key of the step at position with name in a
// task: "<task id>/<position>/<name>".
func IdempotencyKey(taskID string, position int, name string) string {
	return fmt.Sprintf("%s/%d/%s", taskID, position, name)
}

type infoKey struct{}

// WithInfo returns a context carrying info. The executor calls it when it
// starts a step (and a compensator).
func WithInfo(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// GetInfo returns the step info carried by ctx, and false if ctx is not an
// activity context: what activities.GetInfo returns.
func GetInfo(ctx context.Context) (Info, bool) {
	info, ok := ctx.Value(infoKey{}).(Info)
	return info, ok
}
