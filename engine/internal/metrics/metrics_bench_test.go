package metrics

import (
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMetricsPerTask is what metrics add to one single-step task's
// way through a worker: its claim, and the append of its step and outcome
// (which ends the attempt). Compare with the drain bench's time per task.
func BenchmarkMetricsPerTask(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Opts{})
	if err != nil {
		b.Fatal(err)
	}
	benchmarkTaskObservations(b, m)
}

// BenchmarkMetricsNil is the same without metrics: the nil checks alone.
func BenchmarkMetricsNil(b *testing.B) {
	benchmarkTaskObservations(b, nil)
}

func benchmarkTaskObservations(b *testing.B, m *Metrics) {
	start := time.Now()
	running := history.State{
		Scheduled: history.TaskScheduledData{TaskType: "bench.noop", Queue: "default"},
		Status:    history.StatusRunning, Lease: history.Lease{Owner: "w", Epoch: 1},
	}
	done := running
	done.Status, done.Lease.Owner, done.UpdatedAt = history.StatusCompleted, "", start.Add(3*time.Millisecond)
	claimed := []*store.ClaimedTask{{Task: &store.Task{Queue: "default", RunAt: start.Add(-time.Millisecond), UpdatedAt: start}}}
	outcome := &store.EventAppendParams{
		State: running, AttemptStartedAt: start,
		Payloads: []history.Payload{history.StepCompletedData{Name: "noop", DurationMillis: 1}, history.TaskCompletedData{}},
	}
	b.ReportAllocs()
	for b.Loop() {
		m.observeClaimed(claimed)
		m.observeAppended(outcome, done)
	}
}
