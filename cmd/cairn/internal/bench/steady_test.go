package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The steady mode samples the tables while retention removes what the
// producer's tasks leave: the live tasks stay a fraction of those started
// (it fails if nothing is removed), and every sample names every table.
func TestSteadyStateSamplesWhileRetentionRemoves(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := pgConfig(t, "bench_steady", &out)
	err := Steady(context.Background(), cfg, Params{Rate: 200, Duration: 10 * time.Second, Retention: 2 * time.Second,
		Workers: 1, Concurrency: 50, MaxConns: 8}, true)
	require.NoError(t, err)
	var report steadyReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report), out.String())
	require.Len(t, report.Samples, steadySamples)
	last := report.Samples[len(report.Samples)-1]
	// The sampler may lag past the producer's end (a loaded machine), so
	// the last interval may have had nothing left to finish.
	rates := make([]float64, len(report.Samples))
	for i, s := range report.Samples {
		rates[i] = s.FinishedPerSecond
	}
	require.Positive(t, slices.Max(rates), "tasks finish: %v", rates)
	require.Less(t, last.Unfinished, int64(last.Started), "%+v", last)
	require.Contains(t, last.DeadRows, "tasks")
	// How many are gone by the last sample depends on the machine's load
	// (retention runs beside the producer): that some are is the point.
	require.Less(t, last.Rows["tasks"], int64(last.Started), "retention removed tasks that finished: %+v", last)
	for _, table := range steadyTables {
		require.Positive(t, last.Bytes[table], table)
	}
	require.Positive(t, report.PlateauRatio)
	err = Steady(context.Background(), Config{}, Params{Rate: 1, Duration: time.Minute, Retention: time.Second, Workers: 1, Concurrency: 1, MaxConns: 1}, true)
	require.ErrorIs(t, err, ErrConfig, "PostgreSQL only")
}

// A snapshot held in the middle of a steady run keeps every row that dies
// meanwhile: the samples taken while it is held count dead task rows
// (after their VACUUM), those after it is let go count fewer, and the
// report gives the finish rate of each phase.
func TestSteadyHoldsASnapshot(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := pgConfig(t, "bench_steady_hold", &out)
	err := Steady(context.Background(), cfg, Params{Rate: 200, Duration: 20 * time.Second, Retention: 2 * time.Second,
		Workers: 1, Concurrency: 50, MaxConns: 8, HoldXmin: 8 * time.Second}, true)
	require.NoError(t, err)
	var report steadyReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report), out.String())
	require.Len(t, report.Phases, 3)
	before, held, after := report.Phases[0], report.Phases[1], report.Phases[2]
	require.Positive(t, before.Samples)
	require.Positive(t, held.Samples)
	require.Positive(t, after.Samples)
	require.Positive(t, before.FinishedPerSecond)
	require.Positive(t, report.HoldRatio)
	require.Greater(t, held.MaxDeadTasks, before.MaxDeadTasks, "rows that died under the snapshot stay: %+v", report.Phases)
	last := report.Samples[len(report.Samples)-1]
	require.False(t, last.Holding)
	require.Less(t, last.DeadRows["tasks"], held.MaxDeadTasks, "vacuumed once let go: %+v", report.Samples)

	err = Steady(context.Background(), cfg, Params{Rate: 200, Duration: 20 * time.Second, Retention: 2 * time.Second,
		Workers: 1, Concurrency: 50, MaxConns: 8, HoldXmin: 16 * time.Second}, true)
	require.ErrorIs(t, err, ErrConfig, "no room before and after the hold")
}
