package sqlitestore_test

import (
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
)

func newBenchStore(tb testing.TB) store.Store { return newStore(tb) }

func BenchmarkLimitedQueue(b *testing.B)  { storetest.BenchLimitedQueue(b, newBenchStore) }
func BenchmarkTimerLateness(b *testing.B) { storetest.BenchTimerLateness(b, newBenchStore) }
func BenchmarkRetryLateness(b *testing.B) { storetest.BenchRetryLateness(b, newBenchStore) }
func BenchmarkIdleClaim(b *testing.B)     { storetest.BenchIdleClaim(b, newBenchStore) }

func BenchmarkSignalToLongHistory(b *testing.B) { storetest.BenchSignalToLongHistory(b, newBenchStore) }
