package sqlitestore_test

import (
	"context"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
)

// newStore opens a fresh store in a file of the test's own.
func newStore(t testing.TB) *sqlitestore.Store {
	t.Helper()
	return newStoreWith(t, sqlitestore.Config{})
}

// newStoreWith is newStore with cfg (its Path set here).
func newStoreWith(t testing.TB, cfg sqlitestore.Config) *sqlitestore.Store {
	t.Helper()
	cfg.Path = enginetest.SQLitePath(t)
	s, err := sqlitestore.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
}

// TestObserver runs the conformance tests of what the store counts.
func TestObserver(t *testing.T) {
	storetest.RunObserver(t, func(t *testing.T, obs store.Observer) store.Store {
		return newStoreWith(t, sqlitestore.Config{Metrics: obs})
	})
}

// TestStoreConformanceEncoded runs the suite under the payload codecs
// (offloading, encryption), as production writes: the driver holds only
// encoded payloads.
func TestStoreConformanceEncoded(t *testing.T) {
	storetest.RunEncoded(t, func(t *testing.T) store.Store { return newStore(t) })
}

// TestBrokenScheduleIsSkipped spoils a schedule's row under the store (an
// empty task type, which no start accepts).
func TestBrokenScheduleIsSkipped(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	storetest.RunBrokenSchedule(t, s, func(t *testing.T, namespace, name string) {
		_, err := s.DB().ExecContext(context.Background(),
			`UPDATE schedules SET task_type = '' WHERE namespace = ? AND name = ?`, namespace, name)
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestHistoryBounds runs the conformance tests of history limits.
func TestHistoryBounds(t *testing.T) {
	storetest.RunHistoryBounds(t, func(t *testing.T, limits store.HistoryLimits) store.Store {
		return newStoreWith(t, sqlitestore.Config{HistoryLimits: limits})
	})
}
