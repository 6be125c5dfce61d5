package activity_test

import (
	"context"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/activity"
)

func TestRecordUsageAddsUpPerModel(t *testing.T) {
	t.Parallel()
	r := activity.NewUsageRecorder()
	ctx := activity.WithUsageRecorder(context.Background(), r)

	activities.RecordUsage(ctx, activities.Usage{Model: "opus", InputTokens: 100, OutputTokens: 50, CostUSD: 0.01})
	activities.RecordUsage(ctx, activities.Usage{Model: "haiku", InputTokens: 10, OutputTokens: 5, CostUSD: 0.001})
	activities.RecordUsage(ctx, activities.Usage{Model: "opus", InputTokens: 1, OutputTokens: 2, CostUSD: 0.02})

	got := r.Usage()
	require.Len(t, got, 2)
	require.Equal(t, "haiku", got[0].Model, "in model order, whatever order the calls came in")
	require.Equal(t, activities.Usage{Model: "haiku", InputTokens: 10, OutputTokens: 5, CostUSD: 0.001}, got[0])
	require.Equal(t, "opus", got[1].Model)
	require.Equal(t, int64(101), got[1].InputTokens)
	require.Equal(t, int64(52), got[1].OutputTokens)
	require.InDelta(t, 0.03, got[1].CostUSD, 1e-12)
}

func TestRecordUsageOutsideAStepDoesNothing(t *testing.T) {
	t.Parallel()
	require.NotPanics(t, func() {
		activities.RecordUsage(context.Background(), activities.Usage{Model: "m", InputTokens: 1})
	})
	require.Nil(t, activity.NewUsageRecorder().Usage(), "nothing recorded: no usage to write")
}

// Figures that cannot be stored (JSON has no NaN) or that would make a
// counter go down count as zero; the model still shows it was called.
func TestRecordUsageRefusesImpossibleFigures(t *testing.T) {
	t.Parallel()
	r := activity.NewUsageRecorder()
	ctx := activity.WithUsageRecorder(context.Background(), r)
	activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: -5, OutputTokens: 3, CostUSD: math.NaN()})
	activities.RecordUsage(ctx, activities.Usage{Model: "m", CostUSD: math.Inf(1)})
	activities.RecordUsage(ctx, activities.Usage{Model: "m", CostUSD: -1})
	require.Equal(t, []activities.Usage{{Model: "m", OutputTokens: 3}}, r.Usage())
}

func TestRecordUsageFromManyGoroutines(t *testing.T) {
	t.Parallel()
	r := activity.NewUsageRecorder()
	ctx := activity.WithUsageRecorder(context.Background(), r)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			activities.RecordUsage(ctx, activities.Usage{Model: "m", InputTokens: 2, OutputTokens: 1})
		})
	}
	wg.Wait()
	require.Equal(t, []activities.Usage{{Model: "m", InputTokens: 100, OutputTokens: 50}}, r.Usage())
}
