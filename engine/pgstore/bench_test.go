package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/cairnflow/cairn/history"
)

func BenchmarkTaskStart(b *testing.B) {
	ctx := context.Background()
	s := enginetest.Store(b)
	params := (*enginetest.TaskOpts)(nil).Params()
	for b.Loop() {
		if _, err := s.TaskStart(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	enginetest.RequireProjectionsMatch(b, s)
}

// BenchmarkTaskClaimMany measures claiming a batch of 100 due tasks: one
// claim statement and one history load. Each op's tasks are started
// beforehand, outside the timer.
func BenchmarkTaskClaimMany(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	s := enginetest.Store(b)
	p := enginetest.ClaimParams("bench", batch, time.Hour)
	claimed := 0
	for b.Loop() {
		b.StopTimer()
		enginetest.StartTasks(b, s, batch, nil)
		b.StartTimer()
		gotRes, err := s.TaskClaim(ctx, p)
		got := gotRes.Tasks
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != batch {
			b.Fatalf("claimed %d of %d", len(got), batch)
		}
		claimed += len(got)
	}
	b.ReportMetric(float64(claimed)/b.Elapsed().Seconds(), "tasks/s")
	b.StopTimer()
	enginetest.RequireProjectionsMatch(b, s)
}

// BenchmarkEventAppend measures one fenced step_completed append. Tasks
// are rotated every 100 steps so the history stays short.
func BenchmarkEventAppend(b *testing.B) {
	const stepsPerTask = 100
	ctx := context.Background()
	s := enginetest.Store(b)
	var (
		ct *store.ClaimedTask
		st history.State
	)
	next := func() {
		enginetest.StartTask(b, s, nil)
		ct = enginetest.ClaimOne(b, s, "bench", time.Hour)
		st = ct.State
	}
	next()
	for b.Loop() {
		if len(st.Steps) == stepsPerTask {
			b.StopTimer()
			next()
			b.StartTimer()
		}
		var err error
		st, err = s.EventAppend(ctx, &store.EventAppendParams{
			TaskID: ct.Task.ID, State: st, Epoch: st.Lease.Epoch, Attempt: st.Attempt,
			Payloads: []history.Payload{history.StepCompletedData{Position: len(st.Steps), Name: "step"}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	enginetest.RequireProjectionsMatch(b, s)
}

// BenchmarkTaskClaimPartial measures a claim of up to 10 that finds one due
// task: the idle worker's claim, which reads the outlook too.
func BenchmarkTaskClaimPartial(b *testing.B) {
	ctx := context.Background()
	s := enginetest.Store(b)
	p := enginetest.ClaimParams("bench", 10, time.Hour)
	for b.Loop() {
		b.StopTimer()
		enginetest.StartTasks(b, s, 1, nil)
		b.StartTimer()
		gotRes, err := s.TaskClaim(ctx, p)
		got := gotRes.Tasks
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != 1 {
			b.Fatalf("claimed %d", len(got))
		}
	}
}

func newBenchStore(tb testing.TB) store.Store { return enginetest.Store(tb) }

// The claim loop's timing over PostgreSQL (engine/storetest/bench.go).
func BenchmarkLimitedQueue(b *testing.B)  { storetest.BenchLimitedQueue(b, newBenchStore) }
func BenchmarkTimerLateness(b *testing.B) { storetest.BenchTimerLateness(b, newBenchStore) }
func BenchmarkRetryLateness(b *testing.B) { storetest.BenchRetryLateness(b, newBenchStore) }

// BenchmarkIdleClaim: see storetest.BenchIdleClaim.
func BenchmarkIdleClaim(b *testing.B) {
	storetest.BenchIdleClaim(b, func(tb testing.TB) store.Store { return enginetest.Store(tb) })
}
func BenchmarkSignalToLongHistory(b *testing.B) { storetest.BenchSignalToLongHistory(b, newBenchStore) }
