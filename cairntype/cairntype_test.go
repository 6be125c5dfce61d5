package cairntype_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/cairntype"
)

func TestQueueStatsRates(t *testing.T) {
	t.Parallel()
	q := cairntype.QueueStats{Completed: 9, Failed: 3, Window: time.Minute}
	require.InDelta(t, 0.2, q.Throughput(), 1e-9)
	require.InDelta(t, 0.25, q.ErrorRate(), 1e-9)
	require.Zero(t, cairntype.QueueStats{}.Throughput(), "no window")
	require.Zero(t, cairntype.QueueStats{Window: time.Minute}.ErrorRate(), "nothing finished")
}

func TestSeriesPointRates(t *testing.T) {
	t.Parallel()
	p := cairntype.SeriesPoint{Completed: 6, AttemptsEnded: 8, AttemptsFailed: 2, Started: 4, LatencyTotal: 2 * time.Second}
	require.InDelta(t, 12, p.Throughput(30*time.Second), 1e-9)
	require.InDelta(t, 0.25, p.ErrorRate(), 1e-9)
	require.Equal(t, 500*time.Millisecond, p.MeanLatency())
	var none cairntype.SeriesPoint
	require.Zero(t, none.Throughput(0))
	require.Zero(t, none.ErrorRate())
	require.Zero(t, none.MeanLatency())
}

func TestMillis(t *testing.T) {
	t.Parallel()
	m := cairntype.MillisOf(1234567 * time.Microsecond)
	require.InDelta(t, 1234.567, float64(m), 1e-9)
	require.Equal(t, 1234567*time.Microsecond, m.Duration())
	for d, want := range map[time.Duration]string{
		12345 * time.Millisecond:   "12.3s",
		1234567 * time.Microsecond: "1.235s",
		56789 * time.Microsecond:   "56.8ms",
		1500 * time.Nanosecond:     "2µs",
	} {
		require.Equal(t, want, cairntype.MillisOf(d).String(), "%s", d)
	}
}

func TestDiagnosisNormalize(t *testing.T) {
	t.Parallel()
	d := &cairntype.QueueDiagnosis{
		Depth:         cairntype.QueueDepth{Pending: 3, Retrying: 1},
		WaitingByType: []cairntype.WaitingType{{Type: "b", Waiting: 3}, {Type: "a", Waiting: 1}},
		WaitingByKey:  []cairntype.WaitingKey{{Key: "k", Waiting: 2}},
		Now: cairntype.DiagnosisHalf{AttemptsStarted: 4, Retries: 1, WorkerIDs: []string{"w2", "w1"},
			Types: []cairntype.TypeStats{{Type: "c"}, {Type: "a"}}},
	}
	d.Normalize()
	require.Equal(t, 4, d.Depth.Waiting())
	require.InDelta(t, 0.75, d.WaitingByType[0].Share, 1e-9)
	require.InDelta(t, 0.5, d.WaitingByKey[0].Share, 1e-9)
	require.Equal(t, []string{"w1", "w2"}, d.Now.WorkerIDs)
	require.Equal(t, 2, d.Now.Workers)
	require.InDelta(t, 0.25, d.Now.RetryShare, 1e-9)
	require.Equal(t, []string{"a", "b", "c"}, d.TypeNames())

	// The lists it fills are never null in the JSON the HTTP API serves.
	out, err := json.Marshal(d)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(out, &raw))
	require.Equal(t, []any{}, raw["then"].(map[string]any)["types"])
	require.Equal(t, []any{}, raw["then"].(map[string]any)["worker_ids"])
	require.Equal(t, []any{}, raw["limits"].(map[string]any)["rate_limits"])
}

func TestValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, cairntype.QueueConfig{Namespace: "default", Name: "llm", MaxWaiting: 2}.Validate())
	require.Error(t, cairntype.QueueConfig{Namespace: "default"}.Validate(), "no name")
	require.Error(t, cairntype.QueueConfig{Namespace: "default", Name: "q", Concurrency: -1}.Validate())

	require.NoError(t, cairntype.NamespaceConfig{Name: "default", Retention: time.Hour,
		TypeRetention: map[string]time.Duration{"report": time.Minute}}.Validate())
	require.Error(t, cairntype.NamespaceConfig{}.Validate(), "no name")
	require.Error(t, cairntype.NamespaceConfig{Name: "default", Retention: time.Microsecond}.Validate(), "under a millisecond")
	require.Error(t, cairntype.NamespaceConfig{Name: "default", TypeRetention: map[string]time.Duration{"": time.Hour}}.Validate())
	many := map[string]time.Duration{}
	for i := range cairntype.MaxTypeRetentions + 1 {
		many[string(rune('a'+i%26))+time.Duration(i).String()] = time.Hour
	}
	require.Error(t, cairntype.NamespaceConfig{Name: "default", TypeRetention: many}.Validate())
}

func TestErrorTypes(t *testing.T) {
	t.Parallel()
	full := errors.Wrap(&cairntype.QueueFullError{Namespace: "default", Queue: "llm", Waiting: 2, MaxWaiting: 2, Adding: 1, RetryAfter: time.Second}, "start")
	require.ErrorIs(t, full, cairntype.ErrQueueFull)
	var qf *cairntype.QueueFullError
	require.ErrorAs(t, full, &qf)
	require.Equal(t, "llm", qf.Queue)

	hist := &cairntype.HistoryFullError{Events: 10, Adding: 1, MaxEvents: 10}
	require.ErrorIs(t, hist, cairntype.ErrHistoryFull)
	require.Contains(t, hist.Error(), "at the limit of 10")
	require.Contains(t, (&cairntype.HistoryFullError{Bytes: 90, AddingBytes: 20, MaxBytes: 100}).Error(), "would pass the limit of 100")
}
