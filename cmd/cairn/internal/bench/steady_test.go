package bench

import (
	"bytes"
	"context"
	"encoding/json"
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
	require.GreaterOrEqual(t, len(report.Samples), 10)
	last := report.Samples[len(report.Samples)-1]
	require.Less(t, last.Rows["tasks"], int64(last.Started/2), "retention removed the tasks that finished: %+v", last)
	for _, table := range steadyTables {
		require.Positive(t, last.Bytes[table], table)
	}
	require.Positive(t, report.PlateauRatio)
	err = Steady(context.Background(), Config{}, Params{Rate: 1, Duration: time.Minute, Retention: time.Second, Workers: 1, Concurrency: 1, MaxConns: 1}, true)
	require.ErrorIs(t, err, ErrConfig, "PostgreSQL only")
}
