// Package metrics counts what the runtime and the stores write, for
// Prometheus: [Metrics] is the [store.Observer] the drivers feed as they
// commit, and the queue collectors read the database at scrape time.
//
// It imports engine/store and history.
package metrics

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a store writes, for Prometheus: it is the
// [store.Observer] a driver's Config takes (pgstore.Config.Metrics,
// sqlitestore.Config.Metrics; or sdk.WorkerConfig / sdk.ClientConfig). A nil
// *Metrics counts nothing and costs nothing. Users make one with
// sdk.NewMetrics.
//
// Every figure is taken from events as they are committed, in the process
// that commits them: an append the database refused counts nothing, and a
// task's outcome is counted once, by the worker (or client, or rescuer)
// that wrote it. Summing over processes gives the cluster's totals. What
// the database holds now (queue depths) comes from [NewQueueCollector]
// instead, which reads it at scrape time.
type Metrics struct {
	tasksFinished    *prometheus.CounterVec
	retries          *prometheus.CounterVec
	deadLetters      *prometheus.CounterVec
	leaseExpirations *prometheus.CounterVec
	cancellations    *prometheus.CounterVec
	compensations    *prometheus.CounterVec
	attemptDuration  *prometheus.HistogramVec
	stepDuration     *prometheus.HistogramVec
	scheduleToStart  *prometheus.HistogramVec
	aiTokens         *prometheus.CounterVec
	aiCost           *prometheus.CounterVec
	scheduleSkipped  *prometheus.CounterVec
	removedTasks     *prometheus.CounterVec
	removedEvents    *prometheus.CounterVec
	signals          *prometheus.CounterVec
	waitsStarted     *prometheus.CounterVec
	waitsTimedOut    *prometheus.CounterVec
	childrenStarted  *prometheus.CounterVec
	childrenFinished *prometheus.CounterVec
	probesLost       prometheus.Counter
	notifiersPolling prometheus.Gauge
	strandedTasks    *prometheus.GaugeVec
	modelWait        *prometheus.HistogramVec
	modelAdmitted    *prometheus.CounterVec
	budgetRefusals   *prometheus.CounterVec
	budgetRaises     *prometheus.CounterVec
	budgetSettled    *prometheus.CounterVec

	labelKeys []string // task label keys that are metric labels too (Opts.TaskLabels)
}

// Opts configure [New].
type Opts struct {
	// TaskLabels are task label keys (StartOpts.Labels) to break
	// cairn_tasks_finished_total, cairn_ai_tokens_total and
	// cairn_ai_cost_usd_total down by, each as a metric label
	// "label_<key>" ('.', '-' and '/' become '_'); a task without the
	// label has "". Name only labels with a bounded set of values (a
	// tenant tier, a scenario, a model family; never an id): each value is
	// a time series.
	TaskLabels []string
}

// The outcome label of cairn_tasks_finished_total: the terminal status.
const (
	outcomeCompleted    = "completed"
	outcomeFailed       = "failed"
	outcomeCancelled    = "cancelled"
	outcomeDeadLettered = "dead_lettered"
	outcomeExpired      = "expired"
	outcomeContinued    = "continued" // a run that continued as new
)

// The outcome label of cairn_compensations_total.
const (
	compensationOK     = "ok"
	compensationFailed = "failed"
)

// durationBuckets (seconds) span a no-op step to an hour-long attempt: AI
// steps commonly take seconds to minutes.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// waitBuckets (seconds) span a claim within a millisecond of a task being
// due to a backlog an hour deep.
var waitBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New makes cairn's metrics and registers them with reg (a
// prometheus.NewRegistry(), or prometheus.DefaultRegisterer). Registering
// a second Metrics with the same registerer is an error: make one per
// process and share it among its workers and clients.
func New(reg prometheus.Registerer, opts Opts) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("engine: NewMetrics needs a registerer (prometheus.NewRegistry() or prometheus.DefaultRegisterer)")
	}
	extra := make([]string, len(opts.TaskLabels))
	seen := map[string]bool{}
	for i, key := range opts.TaskLabels {
		extra[i] = metricLabelName(key)
		if !history.IsLabelKey(key) {
			return nil, errors.Newf("engine: metrics task label %q: a label key is 1 to 64 letters, digits, '_', '.', '-' or '/'", key)
		}
		if seen[extra[i]] {
			return nil, errors.Newf("engine: metrics task label %q repeats another", key)
		}
		seen[extra[i]] = true
	}
	m := newMetrics(extra)
	m.labelKeys = opts.TaskLabels
	var done []prometheus.Collector
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			// Leave reg as it was, so the caller can try again.
			for _, r := range done {
				reg.Unregister(r)
			}
			return nil, errors.Wrap(err, "engine: register metrics")
		}
		done = append(done, c)
	}
	return m, nil
}

// metricLabelName is the metric label a task label key becomes.
func metricLabelName(key string) string {
	return "label_" + strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '/' {
			return '_'
		}
		return r
	}, key)
}

// newMetrics makes the metrics; extra are the task-label metric labels.
func newMetrics(extra []string) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &Metrics{
		tasksFinished: counter("tasks_finished_total",
			"Tasks that reached a terminal status, by type and outcome (completed, failed, cancelled, dead_lettered, expired, continued).",
			append([]string{"type", "outcome"}, extra...)...),
		retries: counter("retries_total",
			"Failed attempts that were scheduled to run again, by type and error class (transient, permanent).",
			"type", "class"),
		deadLetters: counter("dead_letters_total",
			"Tasks dead-lettered for an operator to look at, by type.",
			"type"),
		leaseExpirations: counter("lease_expirations_total",
			"Attempts whose worker stopped renewing its lease, found by the rescuer, by type.",
			"type"),
		cancellations: counter("cancellations_total",
			"Cancel requests recorded (cancel_requested), by type.",
			"type"),
		compensations: counter("compensations_total",
			"Compensators run to an end, by type and outcome (ok, failed).",
			"type", "outcome"),
		attemptDuration: histogram("attempt_duration_seconds",
			"Time from an attempt's start (its claim) to the event that ended it, by type.",
			durationBuckets, "type"),
		stepDuration: histogram("step_duration_seconds",
			"Time a completed step's function ran, by type and step name.",
			durationBuckets, "type", "step"),
		scheduleToStart: histogram("schedule_to_start_seconds",
			"Time from when a task was due to its claim by a worker, by queue.",
			waitBuckets, "queue"),
		aiTokens: counter("ai_tokens_total",
			"AI model tokens steps reported (activities.RecordUsage), by type, model and direction (input, output).",
			append([]string{"type", "model", "direction"}, extra...)...),
		aiCost: counter("ai_cost_usd_total",
			"Cost in US dollars of the AI model calls steps reported (activities.RecordUsage), by type and model.",
			append([]string{"type", "model"}, extra...)...),
		scheduleSkipped: counter("schedule_skipped_total",
			"Schedule ticks skipped for now (tried again later), by namespace, schedule and reason (queue_full).",
			"namespace", "schedule", "reason"),
		signals: counter("signals_total",
			"Signals appended to tasks (signal_received), by namespace and signal name.",
			"namespace", "name"),
		waitsStarted: counter("waits_started_total",
			"Receives that waited for a signal (wait_started), by namespace.",
			"namespace"),
		waitsTimedOut: counter("waits_timed_out_total",
			"Waits for a signal that reached their deadline without one (wait_timed_out), by namespace.",
			"namespace"),
		childrenStarted: counter("children_started_total",
			"Child workflows started (child_started), by namespace and child type.",
			"namespace", "type"),
		childrenFinished: counter("children_finished_total",
			"Child workflows whose end their parent recorded (child_finished), by namespace and outcome (the child's status).",
			"namespace", "outcome"),
		removedTasks: counter("retention_removed_tasks_total",
			"Finished tasks retention removed whole, with their logs, by namespace.",
			"namespace"),
		removedEvents: counter("retention_removed_events_total",
			"Events removed with the tasks retention removed, by namespace.",
			"namespace"),
		probesLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Name: "notification_probes_lost_total",
			Help: "Probes a notifier sent itself through the database that did not come back in time: notifications are not arriving."}),
		strandedTasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cairn", Name: "stranded_tasks",
			Help: "In-flight tasks this worker's code cannot replay (its deploy check), by namespace, type and version: left to a worker with compatible code, or refused its start."},
			[]string{"namespace", "type", "version"}),
		notifiersPolling: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cairn", Name: "notifiers_polling",
			Help: "Notifiers of this process whose notifications are not arriving (their last probe was lost), so their workers poll in their place."}),
		modelWait: histogram("model_limit_wait_seconds",
			"How long steps under a model rate limit waited for their turn before they ran (0 for those admitted at once), by namespace and model.",
			waitBuckets, "namespace", "model"),
		modelAdmitted: counter("model_limit_admitted_tokens_total",
			"Tokens steps under a model rate limit were admitted with (their declared Spend.Tokens), by namespace and model.",
			"namespace", "model"),
		budgetRefusals: counter("budget_refusals_total",
			"Steps a budget refused (budget_refused), by namespace, the budget's scope kind (task, namespace, fairness_key, type) and action (fail, wait).",
			"namespace", "scope", "action"),
		budgetRaises: counter("budget_raises_total",
			"Waiting tasks a budget's raise woke (budget_raised), by namespace and the budget's scope kind.",
			"namespace", "scope"),
		budgetSettled: counter("budget_settlements_total",
			"Step spends settled against budgets (budget_settled), by namespace and reason (step_completed, step_failed, released, lease_expired).",
			"namespace", "reason"),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.tasksFinished, m.retries, m.deadLetters, m.leaseExpirations, m.cancellations, m.compensations,
		m.attemptDuration, m.stepDuration, m.scheduleToStart, m.aiTokens, m.aiCost, m.scheduleSkipped,
		m.signals, m.waitsStarted, m.waitsTimedOut, m.childrenStarted, m.childrenFinished,
		m.removedTasks, m.removedEvents, m.probesLost, m.notifiersPolling, m.strandedTasks,
		m.modelWait, m.modelAdmitted, m.budgetRefusals, m.budgetRaises, m.budgetSettled,
	}
}

// ModelAdmitted counts a step admitted under a model rate limit: how
// long it waited, and the tokens it reserved. Labels are bounded: only
// models with a limit (at most store.MaxModelLimits a namespace) count.
// A nil *Metrics counts nothing.
func (m *Metrics) ModelAdmitted(namespace, model string, waited time.Duration, tokens int64) {
	if m != nil {
		m.modelWait.WithLabelValues(namespace, model).Observe(waited.Seconds())
		m.modelAdmitted.WithLabelValues(namespace, model).Add(float64(tokens))
	}
}

// Stranded sets how many in-flight tasks of namespace's type at version
// a worker's deploy check found its code cannot replay. A nil *Metrics
// counts nothing.
func (m *Metrics) Stranded(namespace, typ string, version, n int) {
	if m != nil {
		m.strandedTasks.WithLabelValues(namespace, typ, strconv.Itoa(version)).Set(float64(n))
	}
}

// NotificationProbeLost counts a notifier's probe that did not come back.
// A nil *Metrics counts nothing.
func (m *Metrics) NotificationProbeLost() {
	if m != nil {
		m.probesLost.Inc()
	}
}

// NotifierPolling counts a notifier in (polling) or out of the notifiers
// whose notifications are not arriving. A nil *Metrics counts nothing.
func (m *Metrics) NotifierPolling(polling bool) {
	if m == nil {
		return
	}
	if polling {
		m.notifiersPolling.Inc()
	} else {
		m.notifiersPolling.Dec()
	}
}

// ObserveAppended counts the events of an append a store committed; next
// is the task's state after it. Drivers call it ([store.Observer]); a nil
// *Metrics counts nothing.
func (m *Metrics) ObserveAppended(p *store.EventAppendParams, next history.State) {
	m.observeAppended(p, next)
}

// ObserveClaimed records how long each task a store claimed waited. A nil
// *Metrics records nothing.
func (m *Metrics) ObserveClaimed(claimed []*store.ClaimedTask) { m.observeClaimed(claimed) }

// ObserveScheduleSkipped counts a schedule tick a store skipped (and
// recorded as skipped). A nil *Metrics counts nothing.
func (m *Metrics) ObserveScheduleSkipped(f store.ScheduleFiring) {
	if m == nil {
		return
	}
	m.scheduleSkipped.WithLabelValues(f.Namespace, f.Name, f.SkipReason).Inc()
}

// ObserveRemoved counts what retention removed from namespace. A nil
// *Metrics counts nothing.
func (m *Metrics) ObserveRemoved(namespace string, res store.RemoveResult) {
	if m == nil {
		return
	}
	m.removedTasks.WithLabelValues(namespace).Add(float64(res.Tasks))
	m.removedEvents.WithLabelValues(namespace).Add(float64(res.Events))
}

// observeAppended counts the events of an append that was committed; next
// is the task's state after it.
func (m *Metrics) observeAppended(p *store.EventAppendParams, next history.State) {
	if m == nil {
		return
	}
	taskType, labels := next.Scheduled.TaskType, m.taskLabelValues(next.Scheduled.Labels)
	for _, payload := range p.Payloads {
		m.observeEvent(taskType, labels, payload)
		m.observeSignalEvent(next.Scheduled.Namespace, payload)
	}
	if !p.AttemptStartedAt.IsZero() && attemptEnded(p.State, next) {
		m.attemptDuration.WithLabelValues(taskType).Observe(seconds(next.UpdatedAt.Sub(p.AttemptStartedAt)))
	}
}

// attemptEnded reports whether the append that took before to after ended
// the running attempt: its lease is given up by every event that ends one
// (a retry, an outcome, a release, a timer, a lease expiry).
func attemptEnded(before, after history.State) bool {
	return before.Lease.Owner != "" && after.Lease.Owner == ""
}

// taskLabelValues returns the values of the configured task labels.
func (m *Metrics) taskLabelValues(labels map[string]string) []string {
	if len(m.labelKeys) == 0 {
		return nil
	}
	out := make([]string, len(m.labelKeys))
	for i, k := range m.labelKeys {
		out[i] = labels[k]
	}
	return out
}

func (m *Metrics) observeEvent(taskType string, labels []string, payload history.Payload) {
	switch p := payload.(type) {
	case history.StepCompletedData:
		m.stepDuration.WithLabelValues(taskType, p.Name).Observe(float64(p.DurationMillis) / 1000)
		m.observeUsage(taskType, labels, p.Usage)
	case history.AttemptFailedData:
		if p.NextRunAt != nil {
			m.retries.WithLabelValues(taskType, string(p.Error.Class)).Inc()
		}
		m.observeUsage(taskType, labels, p.Usage)
	case history.TaskCompletedData:
		m.finished(taskType, outcomeCompleted, labels)
	case history.TaskFailedData:
		m.finished(taskType, outcomeFailed, labels)
	case history.TaskDeadLetteredData:
		m.finished(taskType, outcomeDeadLettered, labels)
		m.deadLetters.WithLabelValues(taskType).Inc()
	case history.TaskCancelledData:
		m.finished(taskType, outcomeCancelled, labels)
	case history.TaskExpiredData:
		m.finished(taskType, outcomeExpired, labels)
	case history.TaskContinuedData:
		m.finished(taskType, outcomeContinued, labels)
	case history.LeaseExpiredData:
		m.leaseExpirations.WithLabelValues(taskType).Inc()
	case history.CancelRequestedData:
		m.cancellations.WithLabelValues(taskType).Inc()
	case history.StepCompensatedData:
		m.compensations.WithLabelValues(taskType, compensationOK).Inc()
	case history.CompensationFailedData:
		m.compensations.WithLabelValues(taskType, compensationFailed).Inc()
	}
}

// observeSignalEvent counts the signal, wait, child and budget events of
// an append, by the task's namespace.
func (m *Metrics) observeSignalEvent(namespace string, payload history.Payload) {
	switch p := payload.(type) {
	case history.SignalReceivedData:
		m.signals.WithLabelValues(namespace, p.Name).Inc()
	case history.WaitStartedData:
		m.waitsStarted.WithLabelValues(namespace).Inc()
	case history.WaitTimedOutData:
		m.waitsTimedOut.WithLabelValues(namespace).Inc()
	case history.ChildStartedData:
		m.childrenStarted.WithLabelValues(namespace, p.TaskType).Inc()
	case history.ChildFinishedData:
		m.childrenFinished.WithLabelValues(namespace, string(p.Status)).Inc()
	case history.BudgetRefusedData:
		m.budgetRefusals.WithLabelValues(namespace, budgetScope(p.Budget.Ref), p.Action).Inc()
	case history.BudgetRaisedData:
		m.budgetRaises.WithLabelValues(namespace, budgetScope(p.Budget.Ref)).Inc()
	case history.BudgetSettledData:
		m.budgetSettled.WithLabelValues(namespace, p.Reason).Inc()
	}
}

// budgetScope is the kind of budget ref names (task, namespace,
// fairness_key, type), never its key: a label of bounded values.
func budgetScope(ref string) string {
	for _, prefix := range []string{history.BudgetRefTaskPrefix, history.BudgetRefKeyPrefix, history.BudgetRefTypePrefix} {
		if strings.HasPrefix(ref, prefix) {
			return strings.TrimSuffix(prefix, ":")
		}
	}
	return history.BudgetRefNamespace
}

func (m *Metrics) finished(taskType, outcome string, labels []string) {
	m.tasksFinished.WithLabelValues(append([]string{taskType, outcome}, labels...)...).Inc()
}

// observeUsage adds a step's AI usage. Figures that a counter cannot take
// (negative, not finite) are skipped rather than panicking the writer:
// events may come from code other than activities.RecordUsage.
func (m *Metrics) observeUsage(taskType string, labels []string, usage []history.Usage) {
	for _, u := range usage {
		if u.InputTokens > 0 {
			m.aiTokens.WithLabelValues(append([]string{taskType, u.Model, "input"}, labels...)...).Add(float64(u.InputTokens))
		}
		if u.OutputTokens > 0 {
			m.aiTokens.WithLabelValues(append([]string{taskType, u.Model, "output"}, labels...)...).Add(float64(u.OutputTokens))
		}
		if u.CostUSD > 0 && !math.IsInf(u.CostUSD, 0) {
			m.aiCost.WithLabelValues(append([]string{taskType, u.Model}, labels...)...).Add(u.CostUSD)
		}
	}
}

// observeClaimed records how long each claimed task waited: from its run
// time (when it became due) to its claim, both on the database's clock
// except a run time a client chose.
func (m *Metrics) observeClaimed(claimed []*store.ClaimedTask) {
	if m == nil {
		return
	}
	for _, ct := range claimed {
		t := ct.Task
		m.scheduleToStart.WithLabelValues(t.Queue).Observe(seconds(t.UpdatedAt.Sub(t.RunAt)))
	}
}

// seconds converts d for a histogram; a negative d (clocks apart) counts as
// zero.
func seconds(d time.Duration) float64 {
	return max(d, 0).Seconds()
}

// queueScrapeTimeout bounds the query behind a scrape of the queue
// collector: a slow database makes the scrape fail, not hang.
const queueScrapeTimeout = 5 * time.Second

// The statuses cairn_queue_tasks reports: the unfinished ones, and dead
// letters, which wait for a person.
var queueGaugeStatuses = []history.Status{
	history.StatusPending, history.StatusRetrying, history.StatusRunning, history.StatusDeadLettered,
}

// queueCollector reports queue depths read from the database at scrape
// time, so every process reports the same, right figures however many
// workers and clients change them.
type queueCollector struct {
	store          store.Store
	cells          []Cell           // instead of store: every cell's, and cellUp
	cellUp         *prometheus.Desc // with cells only: set by NewCellQueueCollector
	tasks          *prometheus.Desc
	oldest         *prometheus.Desc
	oldestFinished *prometheus.Desc
}

// NewQueueCollector returns a collector of gauges read from store's
// database at each scrape, over every namespace and queue with tasks in
// them:
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
func NewQueueCollector(s store.Store) prometheus.Collector {
	return newQueueCollector(s)
}

// Cell is one database of a placement of namespaces on several
// (sdk.Cells), as [NewCellQueueCollector] reads it.
type Cell struct {
	Name  string
	Store store.Store
	// Holds reports whether the placement puts namespace in this cell: a
	// cell's rows of a namespace placed elsewhere (left there by a move,
	// say) are not its to report, and would repeat the other cell's
	// series.
	Holds func(namespace string) bool
}

// NewCellQueueCollector is [NewQueueCollector] over every cell of cells
// (in the order given), with one gauge more, cairn_cell_up{cell}: 1 when
// the cell's database answered the scrape, else 0. A cell that does not
// answer leaves its series out of the scrape, which the others' still
// fill: one cell down must not blind the monitoring of the rest. Each cell
// reports the namespaces the placement puts in it, and only those.
func NewCellQueueCollector(cells []Cell) prometheus.Collector {
	c := newQueueCollector(nil)
	c.cells = cells
	c.cellUp = prometheus.NewDesc("cairn_cell_up",
		"1 when the cell's database answered the scrape, else 0 (its queues' series are then left out).",
		[]string{"cell"}, nil)
	return c
}

func newQueueCollector(s store.Store) *queueCollector {
	return &queueCollector{
		store: s,
		tasks: prometheus.NewDesc("cairn_queue_tasks",
			"Tasks in a queue by status (pending, retrying, running, dead_lettered), read from the database at scrape time.",
			[]string{"namespace", "queue", "status"}, nil),
		oldest: prometheus.NewDesc("cairn_queue_oldest_waiting_seconds",
			"How long the longest-waiting due task of a queue has been due, read from the database at scrape time; 0 when none is.",
			[]string{"namespace", "queue"}, nil),
		oldestFinished: prometheus.NewDesc("cairn_retention_oldest_finished_seconds",
			"How long ago the oldest finished task a namespace still keeps finished, read from the database at scrape time.",
			[]string{"namespace"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.cellUp != nil {
		ch <- c.cellUp
	}
	ch <- c.tasks
	ch <- c.oldest
	ch <- c.oldestFinished
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueScrapeTimeout)
	defer cancel()
	if c.cellUp != nil {
		c.collectCells(ctx, ch)
		return
	}
	if c.store == nil {
		ch <- prometheus.NewInvalidMetric(c.tasks, errors.New("engine: queue collector has no store"))
		return
	}
	metrics, err := c.read(ctx, c.store, nil)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.tasks, err)
		return
	}
	for _, m := range metrics {
		ch <- m
	}
}

// collectCells reads every cell at once and sends the series of those
// that answered, and each one's cairn_cell_up.
func (c *queueCollector) collectCells(ctx context.Context, ch chan<- prometheus.Metric) {
	read := make([][]prometheus.Metric, len(c.cells))
	failed := make([]bool, len(c.cells))
	var wg sync.WaitGroup
	for i, cell := range c.cells {
		wg.Go(func() {
			var err error
			read[i], err = c.read(ctx, cell.Store, cell.Holds)
			failed[i] = err != nil
		})
	}
	wg.Wait()
	for i, cell := range c.cells {
		up := 1.0
		if failed[i] {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(c.cellUp, prometheus.GaugeValue, up, cell.Name)
		for _, m := range read[i] {
			ch <- m
		}
	}
}

// read reads one store's gauges, of the namespaces keep accepts (nil: all):
// all of them, or an error.
func (c *queueCollector) read(ctx context.Context, s store.Store, keep func(namespace string) bool) ([]prometheus.Metric, error) {
	depths, err := s.QueueGaugeList(ctx, &store.QueueGaugeListParams{})
	if err != nil {
		return nil, err
	}
	var out []prometheus.Metric
	for _, q := range depths {
		if keep != nil && !keep(q.Namespace) {
			continue
		}
		for _, status := range queueGaugeStatuses {
			out = append(out, prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(q.Tasks[status]), q.Namespace, q.Queue, string(status)))
		}
		out = append(out, prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, q.OldestDue.Seconds(), q.Namespace, q.Queue))
	}
	namespaces, err := s.NamespaceList(ctx, &store.NamespaceListParams{})
	if err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		if keep != nil && !keep(ns.Name) {
			continue
		}
		if !ns.OldestFinished.IsZero() && ns.Name != store.DefaultsRow {
			out = append(out, prometheus.MustNewConstMetric(c.oldestFinished, prometheus.GaugeValue, time.Since(ns.OldestFinished).Seconds(), ns.Name))
		}
	}
	return out, nil
}

var _ store.Observer = (*Metrics)(nil)
