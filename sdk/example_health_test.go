package sdk_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// A worker process serves its probes on a port of its own: an
// orchestrator restarts it when /healthz fails and sends it nothing while
// /readyz fails (its database out of reach), and Prometheus scrapes its
// /metrics.
func ExampleWorker_HealthHandler() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cairn-health-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "cairn.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()

	reg := prometheus.NewRegistry()
	metrics, err := sdk.NewMetrics(reg, nil)
	if err != nil {
		panic(err)
	}
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	sdk.Register(worker, sdk.NewWorkflow("example.noop", 1, func(workflow.Context, int) (int, error) { return 0, nil }, nil))
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer worker.Stop(ctx)

	probes := httptest.NewServer(worker.HealthHandler(&sdk.HealthOpts{Gatherer: reg}))
	defer probes.Close()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		res, err := http.Get(probes.URL + path)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(path, res.StatusCode)
	}
	// Output:
	// /healthz 200
	// /readyz 200
	// /metrics 200
}

// docs/worker-health.md shows lines of the example, in order.
func TestWorkerHealthPageShowsTheExample(t *testing.T) {
	t.Parallel()
	if err := doccheck.Check("../docs/worker-health.md", ".."); err != nil {
		t.Fatal(err)
	}
}
