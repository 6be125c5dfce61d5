package plan

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// BenchmarkFoldSeries folds an hour of 100,000 events (20,000 tasks of
// five events: scheduled, started, a step, completed or retried) over ten
// queues into 60 buckets: the Go side of a series read.
func BenchmarkFoldSeries(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := NewSeriesWindow(&store.QueueSeriesParams{Namespace: "default", Window: time.Hour}, now)
	var events []SeriesEvent
	for i := range 20000 {
		id, queue := fmt.Sprintf("task-%06d", i), fmt.Sprintf("q%d", i%10)
		at := w.From.Add(time.Duration(i) * (time.Hour / 20000))
		retry := at.Add(time.Second)
		last := SeriesEvent{Type: history.TaskCompleted}
		if i%7 == 0 {
			last = SeriesEvent{Type: history.AttemptFailed, When: &retry}
		}
		for j, e := range []SeriesEvent{{Type: history.TaskScheduled}, {Type: history.AttemptStarted}, {Type: history.StepCompleted},
			{Type: history.StepCompleted}, last} {
			e.TaskID, e.Queue, e.Seq, e.At = id, queue, int64(j+1), at.Add(time.Duration(j)*10*time.Millisecond)
			events = append(events, e)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := FoldSeries(w, events, nil); len(got) != 10 {
			b.Fatalf("%d series", len(got))
		}
	}
}
