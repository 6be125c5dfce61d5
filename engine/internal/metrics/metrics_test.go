package metrics_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// metricsStore returns a store over a fresh schema that counts into a
// fresh registry.
func metricsStore(t *testing.T) (*pgstore.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Opts{})
	require.NoError(t, err)
	s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: m})
	require.NoError(t, err)
	return s, reg
}

func TestNewMetricsRegistersOnce(t *testing.T) {
	t.Parallel()
	_, err := metrics.New(nil, metrics.Opts{})
	require.Error(t, err)

	reg := prometheus.NewRegistry()
	_, err = metrics.New(reg, metrics.Opts{})
	require.NoError(t, err)
	_, err = metrics.New(reg, metrics.Opts{})
	require.Error(t, err, "the same names twice in one registry")
	var already prometheus.AlreadyRegisteredError
	require.True(t, errors.As(err, &already), "the registry's own error, wrapped: %v", err)
}

// Each event is counted once it is committed, and a refused append
// counts nothing.
func TestMetricsCountCommittedEvents(t *testing.T) {
	t.Parallel()
	s, reg := metricsStore(t)
	ctx := context.Background()
	id := enginetest.StartTask(t, s, nil)
	ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
	require.Equal(t, id, ct.Task.ID)

	usage := []history.Usage{{Model: "m", InputTokens: 100, OutputTokens: 50, CostUSD: 0.01}}
	afterStep, err := enginetest.AppendFenced(ctx, s, ct, history.StepCompletedData{Name: "extract", DurationMillis: 1500, Usage: usage})
	require.NoError(t, err)
	_, err = enginetest.AppendFenced(ctx, s, ct, history.TaskCompletedData{}) // ct.State is behind the step: refused
	require.True(t, errors.Is(err, store.ErrConflict), "%v", err)

	g := enginetest.Gather(t, reg)
	require.Zero(t, g.Value("cairn_tasks_finished_total"), "a refused append counts nothing")
	require.Equal(t, uint64(1), g.SampleCount("cairn_schedule_to_start_seconds", "queue", "default"))
	require.Equal(t, uint64(1), g.SampleCount("cairn_step_duration_seconds", "type", "test", "step", "extract"))
	require.InDelta(t, 1.5, g["cairn_step_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(), 1e-9)
	require.Equal(t, 100.0, g.Value("cairn_ai_tokens_total", "type", "test", "model", "m", "direction", "input"))
	require.Equal(t, 50.0, g.Value("cairn_ai_tokens_total", "type", "test", "model", "m", "direction", "output"))
	require.InDelta(t, 0.01, g.Value("cairn_ai_cost_usd_total", "type", "test", "model", "m"), 1e-12)

	ct.State = afterStep
	enginetest.Complete(t, s, ct)
	g = enginetest.Gather(t, reg)
	require.Equal(t, 1.0, g.Value("cairn_tasks_finished_total", "type", "test", "outcome", "completed"))
	require.Zero(t, g.SampleCount("cairn_attempt_duration_seconds"),
		"the attempt's start is known to the processor and the rescuer, not to a bare append")
	enginetest.RequireProjectionsMatch(t, s)
}

func TestMetricsCountRetriesDeadLettersAndCancels(t *testing.T) {
	t.Parallel()
	s, reg := metricsStore(t)
	ctx := context.Background()
	enginetest.StartTask(t, s, nil)
	ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
	next := plan.Now(nil)
	_, err := enginetest.AppendFenced(ctx, s, ct, history.AttemptFailedData{
		Error: history.ErrorInfo{Class: history.Transient, Message: "503"}, NextRunAt: &next,
		Usage: []history.Usage{{Model: "m", InputTokens: 10, CostUSD: 0.5}},
	})
	require.NoError(t, err)
	ct = enginetest.ClaimOne(t, s, "w1", time.Minute)
	info := history.ErrorInfo{Class: history.Permanent, Message: "bad"}
	_, err = enginetest.AppendFenced(ctx, s, ct, history.AttemptFailedData{Error: info}, history.TaskDeadLetteredData{Reason: "permanent", Error: info})
	require.NoError(t, err)

	pending := enginetest.StartTask(t, s, &enginetest.TaskOpts{RunAt: time.Now().Add(time.Hour)})
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: store.DefaultNamespace, ID: pending, By: "test"})
	require.NoError(t, err)

	g := enginetest.Gather(t, reg)
	require.Equal(t, 1.0, g.Value("cairn_retries_total", "type", "test", "class", "transient"))
	require.Equal(t, 1.0, g.Value("cairn_retries_total"), "the final failure is no retry")
	require.Equal(t, 1.0, g.Value("cairn_dead_letters_total", "type", "test"))
	require.Equal(t, 1.0, g.Value("cairn_tasks_finished_total", "type", "test", "outcome", "dead_lettered"))
	require.Equal(t, 1.0, g.Value("cairn_cancellations_total", "type", "test"))
	require.Equal(t, 1.0, g.Value("cairn_tasks_finished_total", "type", "test", "outcome", "cancelled"))
	require.Equal(t, 2.0, g.Value("cairn_tasks_finished_total"))
	require.Equal(t, 10.0, g.Value("cairn_ai_tokens_total", "direction", "input"), "a failed step's usage counts")
	require.Zero(t, g.Value("cairn_ai_tokens_total", "direction", "output"))
	require.Equal(t, uint64(2), g.SampleCount("cairn_schedule_to_start_seconds"))
	enginetest.RequireProjectionsMatch(t, s)
}

// The rescuer knows when the expired attempt began: its lease_expired
// observes the attempt's duration.
func TestMetricsCountLeaseExpiry(t *testing.T) {
	t.Parallel()
	s, reg := metricsStore(t)
	enginetest.StartTask(t, s, nil)
	enginetest.ClaimOne(t, s, "crashed", 200*time.Millisecond)
	enginetest.RescueOne(t, s)

	g := enginetest.Gather(t, reg)
	require.Equal(t, 1.0, g.Value("cairn_lease_expirations_total", "type", "test"))
	require.Equal(t, uint64(1), g.SampleCount("cairn_attempt_duration_seconds", "type", "test"))
	require.Zero(t, g.Value("cairn_tasks_finished_total"))
}

func TestQueueCollectorReadsTheDatabase(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	enginetest.StartTasks(t, s, 3, &enginetest.TaskOpts{Queue: "a"})
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "b", RunAt: time.Now().Add(time.Hour)})
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "c", RunAt: time.Now().Add(-10 * time.Minute)})
	enginetest.StartTask(t, s, &enginetest.TaskOpts{Namespace: "other", Queue: "a"})
	p := enginetest.ClaimParams("w1", 1, time.Minute)
	p.Queues = []string{"a"}
	require.Len(t, enginetest.Claim(t, s, p), 1)

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewQueueCollector(s)))
	g := enginetest.Gather(t, reg)

	const tasks, oldest = "cairn_queue_tasks", "cairn_queue_oldest_waiting_seconds"
	require.Equal(t, 4*4, g.Series(tasks), "four statuses of each namespace's queue with tasks")
	require.Equal(t, 2.0, g.Value(tasks, "namespace", "default", "queue", "a", "status", "pending"))
	require.Equal(t, 1.0, g.Value(tasks, "namespace", "default", "queue", "a", "status", "running"))
	require.Equal(t, 1, g.Series(tasks, "namespace", "default", "queue", "a", "status", "retrying"), "reported as 0, not left out")
	require.Zero(t, g.Value(tasks, "namespace", "default", "queue", "a", "status", "retrying"))
	require.Zero(t, g.Value(tasks, "namespace", "default", "queue", "a", "status", "dead_lettered"))
	require.Equal(t, 1.0, g.Value(tasks, "namespace", "default", "queue", "b", "status", "pending"))
	require.Equal(t, 1.0, g.Value(tasks, "namespace", "other", "queue", "a", "status", "pending"))

	require.Zero(t, g.Value(oldest, "namespace", "default", "queue", "b"), "a task not yet due is not waiting")
	age := g.Value(oldest, "namespace", "default", "queue", "c")
	require.GreaterOrEqual(t, age, 600.0)
	require.Less(t, age, 660.0)
	require.Positive(t, g.Value(oldest, "namespace", "default", "queue", "a"))

	const oldestFinished = "cairn_retention_oldest_finished_seconds"
	require.Zero(t, g.Series(oldestFinished), "no namespace keeps a finished task yet")
	claimed := enginetest.Claim(t, s, p)
	require.Len(t, claimed, 1)
	finished := claimed[0]
	enginetest.Complete(t, s, finished)
	at := *enginetest.GetTask(t, s, finished.Task.ID).FinishedAt
	g = enginetest.Gather(t, reg)
	require.Equal(t, 1, g.Series(oldestFinished))
	age = g.Value(oldestFinished, "namespace", "default")
	require.InDelta(t, time.Since(at).Seconds(), age, 5, "the age of the oldest finished task kept")
}

// A scrape that cannot read the database fails with the error; it neither
// panics nor reports zeros.
func TestQueueCollectorReportsScrapeErrors(t *testing.T) {
	t.Parallel()
	s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.UnmigratedSchema(t)})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewQueueCollector(s)))
	var gatherErr error
	require.NotPanics(t, func() { _, gatherErr = reg.Gather() })
	require.ErrorContains(t, gatherErr, "read queue depths")
}

// Configured task labels break the outcome and AI usage counters down.
func TestMetricsBreakDownByTaskLabels(t *testing.T) {
	t.Parallel()
	_, err := metrics.New(prometheus.NewRegistry(), metrics.Opts{TaskLabels: []string{"tier", "tier"}})
	require.ErrorContains(t, err, "repeats")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Opts{TaskLabels: []string{"tier", "model.family"}})
	require.NoError(t, err)
	s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: m})
	require.NoError(t, err)
	ctx := context.Background()
	p := (&enginetest.TaskOpts{}).Params()
	p.Scheduled.Labels = map[string]string{"tier": "gold", "tenant": "acme"}
	_, err = s.TaskStart(ctx, p)
	require.NoError(t, err)
	ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
	usage := []history.Usage{{Model: "m", InputTokens: 10, CostUSD: 0.5}}
	_, err = enginetest.AppendFenced(ctx, s, ct, history.StepCompletedData{Name: "llm", Usage: usage}, history.TaskCompletedData{})
	require.NoError(t, err)
	g := enginetest.Gather(t, reg)
	require.Equal(t, 1.0, g.Value("cairn_tasks_finished_total", "type", "test", "outcome", "completed",
		"label_tier", "gold", "label_model_family", ""))
	require.Equal(t, 0.5, g.Value("cairn_ai_cost_usd_total", "model", "m", "label_tier", "gold"))
	require.Equal(t, 10.0, g.Value("cairn_ai_tokens_total", "direction", "input", "label_tier", "gold"))
}

// Signals, waits and children are counted from their committed events,
// by namespace, on both stores.
func TestMetricsCountSignalsAndWaits(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, m *metrics.Metrics) store.Store{
		"postgres": func(t *testing.T, m *metrics.Metrics) store.Store {
			s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: m})
			require.NoError(t, err)
			return s
		},
		"sqlite": func(t *testing.T, m *metrics.Metrics) store.Store {
			s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "m.db"), Metrics: m})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Opts{})
			require.NoError(t, err)
			s := open(t, m)
			ctx := context.Background()
			signal := func(id uuid.UUID, name string) error {
				_, err := requests.Signal(ctx, s, &store.TaskSignalParams{Namespace: store.DefaultNamespace, TaskID: id, Name: name, Sender: "ops"})
				return err
			}

			// A wait that a signal ends.
			id := enginetest.StartTask(t, s, nil)
			ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
			_, err = enginetest.AppendFenced(ctx, s, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.NoError(t, signal(id, "approval"))
			require.NoError(t, signal(id, "approval"))
			require.NoError(t, signal(id, "note"))
			ct = enginetest.ClaimOne(t, s, "w1", time.Minute)
			require.Equal(t, id, ct.Task.ID, "the signal made the task due")
			enginetest.Complete(t, s, ct)
			require.Error(t, signal(id, "approval"), "a finished task refuses signals")

			// A wait that times out.
			id = enginetest.StartTask(t, s, nil)
			ct = enginetest.ClaimOne(t, s, "w1", time.Minute)
			_, err = enginetest.AppendFenced(ctx, s, ct, history.WaitStartedData{Name: "approval", Position: 0, Deadline: time.Now().Add(-time.Second)})
			require.NoError(t, err)
			ct = enginetest.ClaimOne(t, s, "w1", time.Minute)
			require.Equal(t, id, ct.Task.ID, "due at its deadline")
			_, err = enginetest.AppendFenced(ctx, s, ct, history.WaitTimedOutData{Name: "approval", Position: 0})
			require.NoError(t, err)

			g := enginetest.Gather(t, reg)
			require.Equal(t, 2.0, g.Value("cairn_signals_total", "namespace", "default", "name", "approval"), "a refused signal counts nothing")
			require.Equal(t, 1.0, g.Value("cairn_signals_total", "namespace", "default", "name", "note"))
			require.Equal(t, 2.0, g.Value("cairn_waits_started_total", "namespace", "default"))
			require.Equal(t, 1.0, g.Value("cairn_waits_timed_out_total", "namespace", "default"))

			// Children: two started by a parent; one completes, one fails.
			// Their ends are counted from the parent's child_finished,
			// written by the children's terminal appends.
			enginetest.StartTask(t, s, nil)
			parent := enginetest.ClaimOne(t, s, "w1", time.Minute)
			kids := []store.ChildStart{{Task: *(&enginetest.TaskOpts{}).Params()}, {Task: *(&enginetest.TaskOpts{}).Params()}}
			_, err = requests.StartChildren(ctx, s, &store.ChildStartParams{
				Parent:   store.EventAppendParams{TaskID: parent.Task.ID, State: parent.State, Epoch: parent.State.Lease.Epoch, Attempt: parent.State.Attempt},
				Children: kids,
			})
			require.NoError(t, err)
			enginetest.Complete(t, s, enginetest.ClaimOne(t, s, "w1", time.Minute))
			info := history.ErrorInfo{Class: history.Permanent, Message: "no"}
			_, err = enginetest.AppendFenced(ctx, s, enginetest.ClaimOne(t, s, "w1", time.Minute),
				history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info})
			require.NoError(t, err)

			g = enginetest.Gather(t, reg)
			require.Equal(t, 2.0, g.Value("cairn_children_started_total", "namespace", "default", "type", "test"))
			require.Equal(t, 1.0, g.Value("cairn_children_finished_total", "namespace", "default", "outcome", "completed"))
			require.Equal(t, 1.0, g.Value("cairn_children_finished_total", "namespace", "default", "outcome", "failed"))
			enginetest.RequireLintClean(t, mustGather(t, reg))
		})
	}
}

// Budgets' ledger is counted by namespace and the scope's kind (never
// its key): a settlement, a refusal that waits and the raise that wakes
// it, through the composites workers and clients use, on both stores.
func TestMetricsCountBudgetLedger(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, m *metrics.Metrics) store.Store{
		"postgres": func(t *testing.T, m *metrics.Metrics) store.Store {
			s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: m})
			require.NoError(t, err)
			return s
		},
		"sqlite": func(t *testing.T, m *metrics.Metrics) store.Store {
			s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "m.db"), Metrics: m})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Opts{})
			require.NoError(t, err)
			s := open(t, m)
			ctx := context.Background()
			now := time.Now()
			tenant := requests.Budget{Key: store.BudgetWindowKey{Ref: "fairness_key:t1", Start: store.BudgetWindowStart(time.Hour, now)},
				LimitUSD: 1, OnExhausted: history.BudgetWait}
			id := enginetest.StartTask(t, s, nil)
			ct := enginetest.ClaimOne(t, s, "w1", time.Minute)
			ap := store.EventAppendParams{TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt}
			res, err := requests.Reserve(ctx, s, &requests.ReserveParams{Append: ap, Position: 0, Step: "llm",
				Spend: history.Spend{CostUSD: 0.6}, Budgets: []requests.Budget{tenant}, Now: now})
			require.NoError(t, err)
			require.Nil(t, res.Refused)
			ap.State = res.State
			ap.State, err = requests.Settle(ctx, s, &requests.SettleParams{Append: ap, Position: 0, Step: "llm",
				Reason: history.SettleStepCompleted, Reserved: true, CostUSD: 0.7})
			require.NoError(t, err)
			res, err = requests.Reserve(ctx, s, &requests.ReserveParams{Append: ap, Position: 1, Step: "llm",
				Spend: history.Spend{CostUSD: 0.5}, Budgets: []requests.Budget{tenant}, Now: now})
			require.NoError(t, err)
			require.NotNil(t, res.Refused)
			raised, err := requests.RaiseBudget(ctx, s, &requests.RaiseParams{Namespace: store.DefaultNamespace, Budget: tenant,
				USD: 1, By: "ops", At: now})
			require.NoError(t, err)
			require.Equal(t, []uuid.UUID{id}, raised.Woken)

			g := enginetest.Gather(t, reg)
			require.Equal(t, 1.0, g.Value("cairn_budget_settlements_total", "namespace", "default", "reason", "step_completed"))
			require.Equal(t, 1.0, g.Value("cairn_budget_refusals_total", "namespace", "default", "scope", "fairness_key", "action", "wait"))
			require.Equal(t, 1.0, g.Value("cairn_budget_raises_total", "namespace", "default", "scope", "fairness_key"))
			enginetest.RequireLintClean(t, mustGather(t, reg))
		})
	}
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	return families
}
