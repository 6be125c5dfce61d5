package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/history"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The store counts what it writes into the metrics it is given, as
// PGStore does.
func TestStoreCountsItsWritesInMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := engine.NewMetrics(reg)
	require.NoError(t, err)
	s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "m.db"), Metrics: metrics})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	_, err = s.TaskStart(ctx, &engine.TaskStartParams{Namespace: "default", Scheduled: history.Scheduled{
		TaskType: "m", TypeVersion: 1, Queue: "q"}})
	require.NoError(t, err)
	claimed, err := s.TaskClaimMany(ctx, &engine.TaskClaimManyParams{Namespace: "default", Queues: []string{"q"},
		Types: []engine.TypeKey{{Type: "m", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 1.0, total(t, reg, "cairn_schedule_to_start_seconds"), "the claim's wait observed")

	c := claimed[0]
	_, err = s.EventAppend(ctx, &engine.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
		Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: []byte(`1`)}}})
	require.NoError(t, err)
	require.Equal(t, 1.0, total(t, reg, "cairn_tasks_finished_total"), "one task completed")
}

// total sums the metric called name in reg over its labels: the values
// of counters, the sample counts of histograms.
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
