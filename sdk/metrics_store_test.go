package sdk_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// makeStore makes a fresh store of the test's own, counting into own
// (nil: the store counts nothing itself).
type makeStore func(t *testing.T, own store.Observer) store.Store

// onEachDriver runs test on a PostgreSQL store and an embedded one, each
// made by the caller rather than by the SDK from a pool.
func onEachDriver(t *testing.T, test func(t *testing.T, newStore makeStore)) {
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		test(t, func(t *testing.T, own store.Observer) store.Store {
			st, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: own})
			require.NoError(t, err)
			return st
		})
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		test(t, func(t *testing.T, own store.Observer) store.Store {
			st, err := sqlitestore.New(context.Background(), sqlitestore.Config{
				Path: filepath.Join(t.TempDir(), "cairn.db"), Metrics: own})
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		})
	})
}

// Metrics in the SDK configs counts whatever the store (issue 17.4): with
// Store set to a store made without metrics, a completed task and a
// cancelled one produce their cairn_* series, each counted once. So does a
// store made with the same Metrics: the SDK does not count it again.
func TestMetricsInConfigCountOnAnyStore(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, newStore makeStore) {
		for _, tt := range []struct {
			name   string
			ownToo bool // the store was made with the same Metrics
		}{{name: "ConfigOnly"}, {name: "SameMetricsOnStoreToo", ownToo: true}} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				reg := prometheus.NewRegistry()
				metrics, err := sdk.NewMetrics(reg, nil)
				require.NoError(t, err)
				var own store.Observer
				if tt.ownToo {
					own = metrics
				}
				st := newStore(t, own)
				client, err := sdk.NewClient(sdk.ClientConfig{Store: st, Metrics: metrics})
				require.NoError(t, err)
				t.Cleanup(client.Close)
				worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Metrics: metrics, PollInterval: 50 * time.Millisecond})
				require.NoError(t, err)
				okWF, _, _ := registerMetricsWorkflows(worker)

				done := startTask(t, client, okWF, 0, nil) // reports 100/50 tokens
				cancelled := startTask(t, client, okWF, 1, &sdk.StartOpts{Delay: time.Hour})
				require.NoError(t, client.Cancel(context.Background(), cancelled, "not needed"))
				startWorker(t, worker)
				waitTask(t, client, done)
				stopWorker(t, worker) // the outcome written (and counted) before the scrape

				g := enginetest.Gather(t, reg)
				finished := "cairn_tasks_finished_total"
				require.Equal(t, 1.0, g.Value(finished, "type", "metrics.ok", "outcome", "completed"))
				require.Equal(t, 1.0, g.Value(finished, "type", "metrics.ok", "outcome", "cancelled"), "the client's cancel")
				require.Equal(t, 2.0, g.Value(finished), "each outcome once")
				require.Equal(t, 1.0, g.Value("cairn_cancellations_total"))
				require.Equal(t, uint64(1), g.SampleCount("cairn_schedule_to_start_seconds", "queue", "default"), "one claim")
				require.Equal(t, uint64(1), g.SampleCount("cairn_attempt_duration_seconds", "type", "metrics.ok"))
				require.Equal(t, uint64(1), g.SampleCount("cairn_step_duration_seconds", "type", "metrics.ok", "step", "answer"))
				require.Equal(t, 150.0, g.Value("cairn_ai_tokens_total"))
			})
		}
	})
}

// A store made with other metrics than the config's would count every
// event twice, once into each: the SDK refuses the pair, saying so.
func TestMetricsOnStoreAndOtherMetricsInConfigRefused(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, newStore makeStore) {
		storeMetrics, err := sdk.NewMetrics(prometheus.NewRegistry(), nil)
		require.NoError(t, err)
		configMetrics, err := sdk.NewMetrics(prometheus.NewRegistry(), nil)
		require.NoError(t, err)
		st := newStore(t, storeMetrics)

		_, err = sdk.NewClient(sdk.ClientConfig{Store: st, Metrics: configMetrics})
		require.ErrorContains(t, err, "counted twice")
		_, err = sdk.NewWorker(sdk.WorkerConfig{Store: st, Metrics: configMetrics})
		require.ErrorContains(t, err, "counted twice")

		// Either alone is fine.
		_, err = sdk.NewClient(sdk.ClientConfig{Store: st})
		require.NoError(t, err)
		_, err = sdk.NewWorker(sdk.WorkerConfig{Store: newStore(t, nil), Metrics: configMetrics})
		require.NoError(t, err)
	})
}

// The metrics decorator keeps what needs the driver itself: StartTx over a
// caller-given PostgreSQL store still joins the caller's transaction.
func TestStartTxThroughMetricsOnAGivenStore(t *testing.T) {
	t.Parallel()
	pool := enginetest.Pool(t)
	st, err := pgstore.New(pgstore.Config{Pool: pool, Schema: enginetest.Schema(t)})
	require.NoError(t, err)
	metrics, err := sdk.NewMetrics(prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st, Metrics: metrics})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	res, err := client.StartDynamicTx(ctx, tx, sdk.TypeRef{Name: "outbox.send", Version: 1}, "mail", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = client.Get(ctx, res.ID)
	require.NoError(t, err)
}
