package bench

import (
	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// --metrics: the drain's workers count Prometheus metrics, as a deployed
// worker would, so alternating runs with and without show their cost.

// newMetrics returns the metrics the workers count into and their
// registry, or nils without --metrics.
func (f *Params) newMetrics() (*sdk.Metrics, *prometheus.Registry, error) {
	if !f.Metrics {
		return nil, nil, nil
	}
	reg := prometheus.NewRegistry()
	m, err := sdk.NewMetrics(reg, nil)
	return m, reg, err
}

// logMetrics reports what the metrics counted (a scrape, after the drain),
// so a run shows they saw every task finish.
func (e *benchEnv) logMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	families, err := reg.Gather()
	if err != nil {
		return errors.Wrap(err, "gather metrics")
	}
	for _, f := range families {
		if f.GetName() != "cairn_tasks_finished_total" {
			continue
		}
		var finished float64
		for _, m := range f.GetMetric() {
			finished += m.GetCounter().GetValue()
		}
		e.logf("metrics: cairn_tasks_finished_total %.0f", finished)
	}
	return nil
}
