package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The waiting mode parks its tasks and reads the statistics of every
// relation of its schema over the window; it refuses the embedded store
// and a window out of range.
func TestWaitingParksTasksAndReadsTheStatistics(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := pgConfig(t, "bench_waiting", &out)
	p := Params{Waiting: []int{30}, Window: time.Second, Batch: 10, Concurrency: 10, MaxConns: 4}
	require.NoError(t, Waiting(context.Background(), cfg, p, true))
	var report waitingReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report), out.String())
	require.Len(t, report.Rows, 1)
	row := report.Rows[0]
	require.Equal(t, 30, row.Waiting)
	require.GreaterOrEqual(t, row.WindowSeconds, 1.0)
	names := map[string]bool{}
	for _, rel := range row.ByRelation {
		names[rel.Relation] = true
	}
	require.True(t, names["table tasks"] && names["index tasks_claim_idx"], "every relation of the schema: %v", names)
	require.Equal(t, 1.0, report.Ratio, "one size: nothing to compare")

	err := Waiting(context.Background(), Config{}, p, true)
	require.ErrorIs(t, err, ErrConfig, "PostgreSQL only")
	p.Window = time.Millisecond
	err = Waiting(context.Background(), cfg, p, true)
	require.ErrorIs(t, err, ErrConfig, "a window under a second")
}
