package pgstore_test

import (
	"context"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/stretchr/testify/require"
)

// TestStoreConformance runs the store conformance suite against
// PostgreSQL, each test on a fresh migrated schema.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return enginetest.Store(t) })
}

// TestBrokenScheduleIsSkipped spoils a schedule's row under the store (an
// empty task type, which no start accepts).
func TestBrokenScheduleIsSkipped(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	storetest.RunBrokenSchedule(t, s, func(t *testing.T, namespace, name string) {
		_, err := s.Pool().Exec(context.Background(),
			`UPDATE `+s.Schema()+`.schedules SET task_type = '' WHERE namespace = $1 AND name = $2`, namespace, name)
		require.NoError(t, err)
	})
}
