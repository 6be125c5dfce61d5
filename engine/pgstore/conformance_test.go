package pgstore_test

import (
	"context"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/stretchr/testify/require"
)

// TestStoreConformance runs the store conformance suite against
// PostgreSQL, each test on a fresh migrated schema.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return enginetest.Store(t) })
}

// TestTransactionsOnACallersTx runs the conformance tests of
// transactions on the caller's pgx transactions (Store.WithTx).
func TestTransactionsOnACallersTx(t *testing.T) {
	storetest.RunTransactions(t, func(t *testing.T) store.Store { return enginetest.Store(t) },
		func(ctx context.Context, s store.Store) (store.Tx, error) {
			pg := s.(*pgstore.Store)
			tx, err := pg.Pool().Begin(ctx)
			if err != nil {
				return nil, err
			}
			return pg.WithTx(tx), nil
		})
}

// TestObserver runs the conformance tests of what the store counts.
func TestObserver(t *testing.T) {
	storetest.RunObserver(t, func(t *testing.T, obs store.Observer) store.Store {
		s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: obs})
		require.NoError(t, err)
		return s
	})
}

// TestStoreConformanceEncoded runs the suite under the payload codecs
// (offloading, encryption), as production writes: the driver holds only
// encoded payloads.
func TestStoreConformanceEncoded(t *testing.T) {
	storetest.RunEncoded(t, func(t *testing.T) store.Store { return enginetest.Store(t) })
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

// TestStoreConformanceWithoutPreparedStatements runs the suite on stores
// whose pool sends unnamed statements (the mode of a pooler in transaction
// mode), so the hot statements go through their functions (hot.go).
func TestStoreConformanceWithoutPreparedStatements(t *testing.T) {
	pool, err := pgstore.OpenPool(context.Background(), enginetest.DatabaseURL(t), pgstore.PoolOptions{MaxConns: 10, Pooler: pgstore.PoolerTransaction})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: enginetest.Schema(t)})
		require.NoError(t, err)
		require.Contains(t, s.SQL("TaskClaimMany"), `."hot_taskclaimmany_`, "the claim goes through its function")
		return s
	})
}

// TestHistoryBounds runs the conformance tests of history limits.
func TestHistoryBounds(t *testing.T) {
	storetest.RunHistoryBounds(t, func(t *testing.T, limits store.HistoryLimits) store.Store {
		s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), HistoryLimits: limits})
		require.NoError(t, err)
		return s
	})
}
