package sdk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
)

// Metrics counts what cairn writes, for Prometheus: give it to
// [WorkerConfig.Metrics] and [ClientConfig.Metrics] (or to a driver's
// Config: pgstore.Config.Metrics, sqlitestore.Config.Metrics). A nil
// *Metrics counts nothing and costs nothing. Make one with [NewMetrics].
//
// Every figure is taken from events as they are committed, in the process
// that commits them: an append the database refused counts nothing, and a
// task's outcome is counted once, by the worker (or client, or rescuer)
// that wrote it. Summing over processes gives the cluster's totals. What
// the database holds now (queue depths) comes from [NewQueueCollector]
// instead, which reads it at scrape time.
type Metrics = engine.Metrics

// MetricsOpts configure [NewMetrics].
type MetricsOpts struct {
	// TaskLabels are task label keys (StartOpts.Labels) to break
	// cairn_tasks_finished_total, cairn_ai_tokens_total and
	// cairn_ai_cost_usd_total down by, each as a metric label
	// "label_<key>" ('.', '-' and '/' become '_'); a task without the
	// label has "". Name only labels with a bounded set of values (a
	// tenant tier, a scenario, a model family; never an id): each value is
	// a time series.
	TaskLabels []string
}

// NewMetrics makes cairn's metrics and registers them with reg (a
// prometheus.NewRegistry(), or prometheus.DefaultRegisterer). Registering
// a second Metrics with the same registerer is an error: make one per
// process and share it among its workers and clients. opts nil takes the
// defaults.
func NewMetrics(reg prometheus.Registerer, opts *MetricsOpts) (*Metrics, error) {
	if opts == nil {
		opts = &MetricsOpts{}
	}
	return engine.NewMetrics(reg, opts.TaskLabels)
}

// NewQueueCollector returns a collector of gauges read from s's database
// at each scrape, over every namespace and queue with tasks in them:
//
//   - cairn_queue_tasks{namespace, queue, status}: tasks pending (due or
//     not), retrying, running and dead-lettered;
//   - cairn_queue_oldest_waiting_seconds{namespace, queue}: how long the
//     longest-waiting due task (pending or retrying) has been due; 0 when
//     none is;
//   - cairn_retention_oldest_finished_seconds{namespace}: how long ago
//     the oldest finished task the namespace still keeps finished, for
//     each namespace that keeps one: against its retention, how far
//     behind removal is.
//
// A queue with none of those tasks is not reported. A scrape that cannot
// read the database reports the error to the registry (the scrape fails)
// rather than stale or zero figures. Register it with one process's
// registry only: every process would report the same figures.
func NewQueueCollector(s store.Store) prometheus.Collector { return engine.NewQueueCollector(s) }

// NewCellQueueCollector is [NewQueueCollector] over every cell of cells,
// with one gauge more, cairn_cell_up{cell}: 1 when the cell's database
// answered the scrape, else 0. A cell that does not answer leaves its
// series out of the scrape, which the others' still fill: one cell down
// must not blind the monitoring of the rest. Each cell reports the
// namespaces the placement puts in it, and only those.
func NewCellQueueCollector(cells *Cells) prometheus.Collector {
	names := cells.Names()
	qc := make([]engine.QueueCell, len(names))
	for i, name := range names {
		qc[i] = engine.QueueCell{Name: name, Store: cells.Store(name), Holds: func(namespace string) bool {
			in, _, err := cells.Of(namespace)
			return err == nil && in == name
		}}
	}
	return engine.NewCellQueueCollector(qc)
}
