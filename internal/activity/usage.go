package activity

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/cairnflow/cairn/history"
)

// RecordUsage adds u to the [UsageRecorder] of the step running under ctx:
// what activities.RecordUsage does. Outside a step it does nothing. A
// negative or non-finite figure counts as zero: it cannot be stored, and a
// cost or count never goes down.
func RecordUsage(ctx context.Context, u history.Usage) {
	if r, ok := ctx.Value(usageKey{}).(*UsageRecorder); ok {
		r.add(u)
	}
}

type usageKey struct{}

// UsageRecorder collects the usage a step reports through
// activities.RecordUsage. It is safe for concurrent use: a step may fan out
// to several goroutines.
type UsageRecorder struct {
	mu      sync.Mutex
	byModel map[string]*history.Usage
}

// NewUsageRecorder returns an empty recorder. The interpreter makes one
// per step run and attaches it with [WithUsageRecorder].
func NewUsageRecorder() *UsageRecorder {
	return &UsageRecorder{}
}

// WithUsageRecorder returns a context under which [RecordUsage] adds to r.
func WithUsageRecorder(ctx context.Context, r *UsageRecorder) context.Context {
	return context.WithValue(ctx, usageKey{}, r)
}

func (r *UsageRecorder) add(u history.Usage) {
	u.InputTokens = max(u.InputTokens, 0)
	u.OutputTokens = max(u.OutputTokens, 0)
	if u.CostUSD < 0 || math.IsNaN(u.CostUSD) || math.IsInf(u.CostUSD, 0) {
		u.CostUSD = 0 // JSON cannot hold NaN or Inf, and would refuse the whole event
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byModel == nil {
		r.byModel = map[string]*history.Usage{}
	}
	total, ok := r.byModel[u.Model]
	if !ok {
		total = &history.Usage{Model: u.Model}
		r.byModel[u.Model] = total
	}
	total.InputTokens += u.InputTokens
	total.OutputTokens += u.OutputTokens
	total.CostUSD = min(total.CostUSD+u.CostUSD, math.MaxFloat64) // never +Inf, for the same reason
}

// Usage returns the totals per model, in model order (so a step's event is
// the same however its calls interleaved), or nil if nothing was recorded.
func (r *UsageRecorder) Usage() []history.Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byModel) == 0 {
		return nil
	}
	out := make([]history.Usage, 0, len(r.byModel))
	for _, u := range r.byModel {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b history.Usage) int { return strings.Compare(a.Model, b.Model) })
	return out
}
