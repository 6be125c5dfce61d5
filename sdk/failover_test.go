package sdk_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A worker rides out a database outage of LeaseTTL − 2 × HeartbeatInterval;
// it warns at Start when that is less than the failover it should expect:
// ExpectedFailover, or 30 s when its pool names several hosts (a failover
// setup), on either store.
func TestWorkerWarnsWhenItsLeasesEndInAFailover(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10*time.Second, sdk.WorkerConfig{}.RideOut())
	require.Equal(t, 13*time.Second, sdk.WorkerConfig{LeaseTTL: 15 * time.Second, HeartbeatInterval: time.Second}.RideOut())
	_, err := sdk.NewWorker(sdk.WorkerConfig{Pool: enginetest.Pool(t), ExpectedFailover: -time.Second})
	require.ErrorContains(t, err, "ExpectedFailover -1s is negative")

	cases := []struct {
		name      string
		store     string // pg, pg-hosts (several hosts), pgstore-hosts (a Store over them) or sqlite
		cfg       sdk.WorkerConfig
		rideOut   string // the warning's ride_out, "" for no warning
		expecting string
	}{
		{name: "one host", store: "pg"},
		{name: "several hosts", store: "pg-hosts", rideOut: "10s", expecting: "30s"},
		{name: "a store over several hosts", store: "pgstore-hosts", rideOut: "10s", expecting: "30s"},
		{name: "several hosts, long leases", store: "pg-hosts", cfg: sdk.WorkerConfig{LeaseTTL: time.Minute, HeartbeatInterval: 5 * time.Second}},
		{name: "several hosts, a shorter failover expected", store: "pg-hosts", cfg: sdk.WorkerConfig{ExpectedFailover: 9 * time.Second}},
		{name: "one host, a failover expected", store: "pg", cfg: sdk.WorkerConfig{LeaseTTL: 5 * time.Second, HeartbeatInterval: time.Second,
			ExpectedFailover: 12 * time.Second}, rideOut: "3s", expecting: "12s"},
		{name: "embedded, a failover expected", store: "sqlite", cfg: sdk.WorkerConfig{ExpectedFailover: 12 * time.Second},
			rideOut: "10s", expecting: "12s"},
		{name: "embedded", store: "sqlite"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			cfg := c.cfg
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			switch c.store {
			case "pg":
				cfg.Pool, cfg.Schema = enginetest.Pool(t), enginetest.Schema(t)
			case "pg-hosts":
				cfg.Pool, cfg.Schema = severalHostsPool(t), enginetest.Schema(t)
			case "pgstore-hosts":
				st, err := pgstore.New(pgstore.Config{Pool: severalHostsPool(t), Schema: enginetest.Schema(t)})
				require.NoError(t, err)
				cfg.Store = st
			case "sqlite":
				st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "cairn.db"))
				require.NoError(t, err)
				t.Cleanup(func() { _ = st.Close() })
				cfg.Store = st
			}
			w, err := sdk.NewWorker(cfg)
			require.NoError(t, err)
			sdk.Register(w, sdk.NewWorkflow("failover.noop", 1, func(workflow.Context, int) (int, error) { return 0, nil }, nil))
			startWorker(t, w)
			stopWorker(t, w)
			if c.rideOut == "" {
				require.NotContains(t, logs.String(), "ride out", "no warning")
				return
			}
			require.Contains(t, logs.String(), "ride_out="+c.rideOut+" expected_failover="+c.expecting)
			require.Contains(t, logs.String(), "docs/patroni.md")
		})
	}
}

// severalHostsPool is the test database's pool with a second host after
// the first, as a multi-host URL makes it: the first answers, so the
// second is never tried.
func severalHostsPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	cc := cfg.ConnConfig
	cc.Fallbacks = append(cc.Fallbacks, &pgconn.FallbackConfig{Host: "127.0.0.2", Port: cc.Port, TLSConfig: cc.TLSConfig})
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
