package sdk_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A worker is ready while it can claim: it is not ready before it starts,
// the first probe after its database is cut off answers not ready (a
// probe waits ReadyTimeout at most), it is ready again by itself once the
// database answers, and neither live nor ready once stopped. Its health
// handler answers the same over HTTP, with its metrics.
func TestWorkerReadinessFollowsItsDatabase(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	proxy := startProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	b := setup(t, sdk.WorkerConfig{})
	reg := prometheus.NewRegistry()
	metrics, err := sdk.NewMetrics(reg, nil)
	require.NoError(t, err)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: b.schema, PollInterval: 100 * time.Millisecond, Metrics: metrics})
	require.NoError(t, err)
	sdk.Register(w, sdk.NewWorkflow("health.noop", 1, func(ctx workflow.Context, _ int) (int, error) { return 1, nil }, nil))
	srv := httptest.NewServer(w.HealthHandler(&sdk.HealthOpts{Gatherer: reg}))
	t.Cleanup(srv.Close)
	get := func(path string) (int, map[string]any, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		var body map[string]any
		if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			require.NoError(t, json.Unmarshal(raw, &body))
		}
		return res.StatusCode, body, string(raw)
	}
	ctx := context.Background()

	require.Error(t, w.Live(), "not live before it starts")
	require.ErrorIs(t, w.Ready(ctx), sdk.ErrNotReady)
	status, _, _ := get("/healthz")
	require.Equal(t, http.StatusServiceUnavailable, status)

	startWorker(t, w)
	require.NoError(t, w.Live())
	require.NoError(t, w.Ready(ctx))
	status, body, _ := get("/readyz")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"": "ready"}, body["cells"])
	status, _, _ = get("/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _, text := get("/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, text, "cairn_")

	proxy.down()
	cut := time.Now()
	err = w.Ready(ctx)
	t.Logf("the first probe after the cut answered in %s: %v", time.Since(cut), err)
	require.ErrorIs(t, err, sdk.ErrNotReady, "not ready at the first probe after the database is lost")
	require.NoError(t, w.Live(), "still live: an outage is not a reason to restart it")
	status, body, _ = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "not ready", body["status"])
	require.Contains(t, body["reason"], "no database answers")
	require.NotContains(t, body["reason"], "\n", "one line")

	proxy.up()
	back := time.Now()
	for w.Ready(ctx) != nil {
		require.Less(t, time.Since(back), testTimeout, "ready again once the database answers")
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("ready again %s after the database came back", time.Since(back))
	status, _, _ = get("/readyz")
	require.Equal(t, http.StatusOK, status)

	stopWorker(t, w)
	require.Error(t, w.Live(), "not live once stopped")
	require.ErrorIs(t, w.Ready(ctx), sdk.ErrNotReady)
}
