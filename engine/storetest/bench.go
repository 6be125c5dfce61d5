package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// The benchmarks of the claim loop's timing, run by both drivers'
// bench_test.go (newStore returns a fresh, empty, migrated store). They
// report what they measure with b.ReportMetric; the processors poll at the
// default interval (1s), as a worker left to its defaults does.

// Limited-queue benchmark shape: a queue of limitedSlots slots, one worker
// of limitedConcurrency, limitedTasks tasks of limitedTaskTime each.
const (
	limitedSlots       = 3
	limitedConcurrency = 10
	limitedTasks       = 30
	limitedTaskTime    = 50 * time.Millisecond
)

// BenchLimitedQueue measures how well a worker keeps a concurrency-limited
// queue busy: each op runs a batch of tasks through a queue of 3 slots with
// a worker of concurrency 10. It reports tasks/s, the ideal (slots over task
// time) and utilisation, their ratio, in percent.
func BenchLimitedQueue(b *testing.B, newStore func(tb testing.TB) store.Store) {
	s := newStore(b)
	ctx := context.Background()
	require.NoError(b, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: defaultQueue, Concurrency: limitedSlots}))
	h := &busyHandler{d: limitedTaskTime, finished: newCountdown(0)}
	runWorker(b, s, h, workerOpts{Concurrency: limitedConcurrency})
	var ran int
	var busy time.Duration
	for b.Loop() {
		h.finished = newCountdown(limitedTasks)
		began := time.Now()
		startMany(b, s, limitedTasks, time.Time{})
		waitDone(b, h.finished.done, "the batch to finish")
		busy += time.Since(began)
		ran += limitedTasks
	}
	rate := float64(ran) / busy.Seconds()
	ideal := float64(limitedSlots) / limitedTaskTime.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(ideal, "ideal-tasks/s")
	b.ReportMetric(100*rate/ideal, "utilisation-%")
	require.LessOrEqual(b, h.peak, limitedSlots, "the queue's limit held")
}

// latenessTasks is how many tasks each op of a lateness benchmark waits
// on at once.
const latenessTasks = 20

// BenchTimerLateness measures how late a durable timer of 100ms fires:
// from its fire time to its task's next attempt beginning, p50 and p99 over
// every task of every op.
func BenchTimerLateness(b *testing.B, newStore func(tb testing.TB) store.Store) {
	s := newStore(b)
	l := &lateness{finished: newCountdown(0)}
	runWorker(b, s, sleepOnce(100*time.Millisecond, l), workerOpts{Concurrency: latenessTasks})
	benchLateness(b, s, l)
}

// BenchRetryLateness measures how late a retry begins: from the
// next_run_at of an attempt that failed with a 100ms backoff to the next
// attempt beginning, p50 and p99.
func BenchRetryLateness(b *testing.B, newStore func(tb testing.TB) store.Store) {
	s := newStore(b)
	l := &lateness{finished: newCountdown(0)}
	runWorker(b, s, failOnce(100*time.Millisecond, l), workerOpts{Concurrency: latenessTasks})
	benchLateness(b, s, l)
}

func benchLateness(b *testing.B, s store.Store, l *lateness) {
	for b.Loop() {
		l.finished = newCountdown(latenessTasks)
		startMany(b, s, latenessTasks, time.Time{})
		waitDone(b, l.finished.done, "every task to wait once and finish")
	}
	late := slices.Clone(l.late)
	slices.Sort(late)
	b.ReportMetric(quantile(late, 0.50).Seconds()*1000, "p50-late-ms")
	b.ReportMetric(quantile(late, 0.99).Seconds()*1000, "p99-late-ms")
	b.ReportMetric(late[len(late)-1].Seconds()*1000, "max-late-ms")
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// startMany starts n default tasks due at runAt (zero: now) in one call.
func startMany(tb testing.TB, s store.Store, n int, runAt time.Time) {
	tb.Helper()
	ps := make([]*store.TaskStartParams, n)
	for i := range ps {
		ps[i] = spec{RunAt: runAt}.params()
	}
	_, err := s.TaskStartMany(context.Background(), ps)
	require.NoError(tb, err)
}

// BenchIdleClaim measures the poll of an idle worker: a claim that finds
// nothing due among 1,000 and 10,000 tasks not yet due (delayed starts, as
// waits and timers are to the claim). Its cost should not depend on how
// many wait.
func BenchIdleClaim(b *testing.B, newStore func(tb testing.TB) store.Store) {
	for _, waiting := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("waiting=%d", waiting), func(b *testing.B) {
			s := newStore(b)
			for done := 0; done < waiting; done += 1000 {
				startMany(b, s, 1000, time.Now().Add(30*24*time.Hour))
			}
			p := claimParams("w", 100, time.Minute)
			for b.Loop() {
				claimedRes, err := s.TaskClaim(context.Background(), p)
				claimed := claimedRes.Tasks
				require.NoError(b, err)
				require.Empty(b, claimed)
			}
		})
	}
}
