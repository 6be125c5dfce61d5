package activities

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/cairnflow/cairn/history"
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
func RecordUsage(ctx context.Context, u Usage) {
	if r, ok := ctx.Value(usageKey{}).(*UsageRecorder); ok {
		r.add(u)
	}
}

type usageKey struct{}

// UsageRecorder collects the usage a step reports through [RecordUsage].
// It is safe for concurrent use: a step may fan out to several goroutines.
type UsageRecorder struct {
	mu      sync.Mutex
	byModel map[string]*Usage
}

// NewUsageRecorder returns an empty recorder. The workflow runtime makes
// one per step run and attaches it with [WithUsageRecorder].
func NewUsageRecorder() *UsageRecorder {
	return &UsageRecorder{}
}

// WithUsageRecorder returns a context under which [RecordUsage] adds to r.
func WithUsageRecorder(ctx context.Context, r *UsageRecorder) context.Context {
	return context.WithValue(ctx, usageKey{}, r)
}

func (r *UsageRecorder) add(u Usage) {
	u.InputTokens = max(u.InputTokens, 0)
	u.OutputTokens = max(u.OutputTokens, 0)
	if u.CostUSD < 0 || math.IsNaN(u.CostUSD) || math.IsInf(u.CostUSD, 0) {
		u.CostUSD = 0 // JSON cannot hold NaN or Inf, and would refuse the whole event
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byModel == nil {
		r.byModel = map[string]*Usage{}
	}
	total, ok := r.byModel[u.Model]
	if !ok {
		total = &Usage{Model: u.Model}
		r.byModel[u.Model] = total
	}
	total.InputTokens += u.InputTokens
	total.OutputTokens += u.OutputTokens
	total.CostUSD = min(total.CostUSD+u.CostUSD, math.MaxFloat64) // never +Inf, for the same reason
}

// Usage returns the totals per model, in model order (so a step's event is
// the same however its calls interleaved), or nil if nothing was recorded.
func (r *UsageRecorder) Usage() []Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byModel) == 0 {
		return nil
	}
	out := make([]Usage, 0, len(r.byModel))
	for _, u := range r.byModel {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.Model, b.Model) })
	return out
}
