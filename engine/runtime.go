package engine

import (
	"context"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/internal/modellimit"
	"github.com/cairnflow/cairn/engine/internal/notifier"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// The doors into the runtime's rooms, for the SDK (package sdk and its
// attempt executor, sdk/internal/executor), not for users: Go lets only
// code under engine/ import engine/internal, and the SDK drives the
// runtime from outside it. Each name is its room's own; its documentation
// is there.

// Handler runs attempts of claimed tasks: the SDK's attempt executor. See
// processor.Handler.
type Handler = processor.Handler

// Attempt is one claimed attempt of a task, handed to a [Handler]. See
// processor.Attempt.
type Attempt = processor.Attempt

// The causes of an attempt's end a [Handler] tells apart; see the
// processor's.
var (
	ErrReleased        = processor.ErrReleased
	ErrLeaseLost       = processor.ErrLeaseLost
	ErrCancelRequested = processor.ErrCancelRequested
	ErrEnded           = processor.ErrEnded
	ErrSignalArrived   = processor.ErrSignalArrived
)

// Budgets' composites (see requests.Reserve, requests.Settle,
// requests.RaiseBudget).
type (
	Budget        = requests.Budget
	ReserveParams = requests.ReserveParams
	ReserveResult = requests.ReserveResult
	SettleParams  = requests.SettleParams
	RaiseParams   = requests.RaiseParams
	RaiseResult   = requests.RaiseResult
)

// RaiseBudget raises a budget's window and wakes the tasks waiting on it;
// see requests.RaiseBudget.
func RaiseBudget(ctx context.Context, ex store.Executor, p *RaiseParams) (RaiseResult, error) {
	return requests.RaiseBudget(ctx, ex, p)
}

// UsageTotals adds usage up; see requests.UsageTotals.
func UsageTotals(usage []history.Usage) (tokens int64, usd float64) {
	return requests.UsageTotals(usage)
}

// DefaultLeaseTTL is a lease's length unless configured otherwise.
const DefaultLeaseTTL = processor.DefaultLeaseTTL

// NewWorkerID returns an id naming this process: host, pid and a random
// suffix.
func NewWorkerID() string { return processor.NewWorkerID() }

// Processor claims tasks under leases and runs them through a [Handler].
type Processor = processor.Processor

// ProcessorConfig configures a [Processor].
type ProcessorConfig = processor.Config

// NewProcessor returns a processor; see processor.New.
func NewProcessor(cfg ProcessorConfig) (*Processor, error) { return processor.New(cfg) }

// Inquirer is a worker's service that takes the inquiries about tasks of
// its types (queries, updates' validators) and answers them through an
// [InquiryHandler]; see processor.Inquirer.
type Inquirer = processor.Inquirer

// InquirerConfig configures an [Inquirer].
type InquirerConfig = processor.InquirerConfig

// InquiryHandler answers one inquiry an [Inquirer] took.
type InquiryHandler = processor.InquiryHandler

// NewInquirer returns an inquirer; see processor.NewInquirer.
func NewInquirer(cfg InquirerConfig) (*Inquirer, error) { return processor.NewInquirer(cfg) }

// InquiryKeep is how long retention keeps an inquiry once answered, or
// past its deadline unanswered; see maintenance.InquiryKeep.
const InquiryKeep = maintenance.InquiryKeep

// Notifier relays the store's notifications to workers and waiters.
type Notifier = notifier.Notifier

// NotifierOpts configure [NewNotifier].
type NotifierOpts = notifier.Opts

// NewNotifier returns a notifier for s; it listens once started. opts nil
// takes the defaults.
func NewNotifier(s store.Store, opts *NotifierOpts) *Notifier {
	if opts == nil {
		opts = &NotifierOpts{}
	}
	return notifier.New(s, *opts)
}

// Maintainer runs the maintenance services of one store: the lease
// rescuer, and under the leader lease the start-deadline expirer, cron,
// retention and the archiver.
type Maintainer = maintenance.Maintainer

// MaintainerConfig configures a [Maintainer].
type MaintainerConfig = maintenance.Config

// RetentionConfig is what the leader removes.
type RetentionConfig = maintenance.RetentionConfig

// NewMaintainer returns a maintainer; it does nothing until started.
func NewMaintainer(cfg MaintainerConfig) (*Maintainer, error) { return maintenance.New(cfg) }

// TaskRequestParams names a task and who asks something of it, and why.
type TaskRequestParams = requests.Params

// TaskCancelResult says what a cancel did.
type TaskCancelResult = requests.CancelResult

// CancelTask requests the task's cancellation; see requests.Cancel.
func CancelTask(ctx context.Context, s store.Store, p *TaskRequestParams) (TaskCancelResult, error) {
	return requests.Cancel(ctx, s, p)
}

// CompensateTask asks for a completed task's compensators to run; see
// requests.Compensate.
func CompensateTask(ctx context.Context, s store.Store, p *TaskRequestParams) (history.State, error) {
	return requests.Compensate(ctx, s, p)
}

// SignalTask sends a task a signal: signal_received appended to its
// history, decided from its row and two indexed facts of its history,
// over s's statements; see requests.Signal. The payload is written as it
// is given: the SDK's edge encodes it first.
func SignalTask(ctx context.Context, s store.Executor, p *store.TaskSignalParams) (store.SignalResult, error) {
	return requests.Signal(ctx, s, p)
}

// UpdateParams is an accepted update to record; see requests.AcceptUpdate.
type UpdateParams = requests.UpdateParams

// UpdateResult says what [AcceptUpdate] did.
type UpdateResult = requests.UpdateResult

// ErrUpdateMoved marks an update whose task moved on since it was
// validated: validate it again.
var ErrUpdateMoved = requests.ErrUpdateMoved

// AcceptUpdate appends an accepted update to its task, fenced on the
// history its validator saw; see requests.AcceptUpdate. The args are
// written as they are given: the SDK's edge encodes them first.
func AcceptUpdate(ctx context.Context, s store.Executor, p *UpdateParams) (UpdateResult, error) {
	return requests.AcceptUpdate(ctx, s, p)
}

// UpdateState reads a task's state by replaying its history: what an
// update is validated and decided on.
func UpdateState(ctx context.Context, s store.Executor, namespace string, id uuid.UUID) (history.State, error) {
	return requests.UpdateState(ctx, s, namespace, id)
}

// ForkParams describes a fork; see requests.Fork.
type ForkParams = requests.ForkParams

// ForkResult says what a fork wrote.
type ForkResult = requests.ForkResult

// ForkReset is what a reset asks of the original, with its fork; see
// requests.ForkReset.
type ForkReset = requests.ForkReset

// ForkCopy is a step a fork copies.
type ForkCopy = requests.ForkCopy

// ForkCopies returns the steps and patch markers a fork at position at
// copies, or why none can be made; see requests.ForkCopies.
func ForkCopies(id uuid.UUID, events []history.Event, state history.State, at int) ([]ForkCopy, []history.PatchRecordedData, error) {
	return requests.ForkCopies(id, events, state, at)
}

// ForkTask writes a fork in one transaction of ex: its start, its copied
// steps and the original's task_forked; see requests.Fork. The payloads
// are written as given: the SDK's edge encodes them first.
func ForkTask(ctx context.Context, ex store.Executor, p *ForkParams) (ForkResult, error) {
	return requests.Fork(ctx, ex, p)
}

// TaskRequeueParams describes a requeue of dead-lettered tasks.
type TaskRequeueParams = requests.RequeueParams

// RequeueResult is the outcome of one task's requeue.
type RequeueResult = requests.RequeueResult

// RequeueTasks sends dead-lettered tasks back to their queue; see
// requests.Requeue.
func RequeueTasks(ctx context.Context, s store.Store, p *TaskRequeueParams) ([]RequeueResult, error) {
	return requests.Requeue(ctx, s, p)
}

// maxRequeueTries bounds the retries of an erasure that raced another
// writer, as a requeue's.
const maxRequeueTries = requests.MaxRequeueTries

// DiagnoseQueue measures a queue and ranks the likely causes of its
// growth; see diagnosis.Diagnose.
func DiagnoseQueue(ctx context.Context, s store.Store, p *store.QueueDiagnoseParams) (*store.QueueDiagnosis, error) {
	return diagnosis.Diagnose(ctx, s, p)
}

// Metrics counts what a store writes, for Prometheus (users:
// sdk.Metrics).
type Metrics = metrics.Metrics

// NewMetrics makes cairn's metrics, with taskLabels as metric labels too,
// and registers them with reg; see metrics.New.
func NewMetrics(reg prometheus.Registerer, taskLabels []string) (*Metrics, error) {
	return metrics.New(reg, metrics.Opts{TaskLabels: taskLabels})
}

// QueueCell is one cell of a placement, for [NewCellQueueCollector].
type QueueCell = metrics.Cell

// NewQueueCollector returns the collector of queue gauges read from s at
// each scrape; see metrics.NewQueueCollector.
func NewQueueCollector(s store.Store) prometheus.Collector { return metrics.NewQueueCollector(s) }

// NewCellQueueCollector is [NewQueueCollector] over every cell; see
// metrics.NewCellQueueCollector.
func NewCellQueueCollector(cells []QueueCell) prometheus.Collector {
	return metrics.NewCellQueueCollector(cells)
}

// LatestRun returns the row of the current run of the chain of runs
// continued as new task id belongs to; see requests.LatestRun.
func LatestRun(ctx context.Context, ex store.Executor, namespace string, id uuid.UUID) (*store.Task, error) {
	return requests.LatestRun(ctx, ex, namespace, id)
}

// ContinuedAs returns the run a task that ended continued continued as;
// see requests.ContinuedAs.
func ContinuedAs(ctx context.Context, ex store.Executor, t *store.Task) (uuid.UUID, error) {
	return requests.ContinuedAs(ctx, ex, t)
}

// MaxChainHops bounds the runs one request follows along a chain of runs
// continued as new; see requests.MaxChainHops.
const MaxChainHops = requests.MaxChainHops

// ErrChainTooLong marks a request that met more than MaxChainHops runs
// continued as new past the id it was given.
var ErrChainTooLong = requests.ErrChainTooLong

// ModelLimiter admits a worker's steps under the model rate limits of
// one store; see modellimit.Limiter.
type ModelLimiter = modellimit.Limiter

// ModelLimiterConfig configures a [ModelLimiter].
type ModelLimiterConfig = modellimit.Config

// ModelAsk is a step's ask for admission; see modellimit.Ask.
type ModelAsk = modellimit.Ask

// ModelAdmission is a step admitted under its model's limit.
type ModelAdmission = modellimit.Admission

// ErrModelWaitStopping is returned by [ModelLimiter.Admit] when the
// worker began to stop while the step waited.
var ErrModelWaitStopping = modellimit.ErrStopping

// NewModelLimiter returns a model limiter; see modellimit.New.
func NewModelLimiter(cfg ModelLimiterConfig) (*ModelLimiter, error) { return modellimit.New(cfg) }

// RemoteOutcome is what a claim of a remote step reports: see
// [requests.RemoteOutcome].
type RemoteOutcome = requests.RemoteOutcome

// ErrClaimLost marks an outcome under a claim that no longer holds its
// remote step.
var ErrClaimLost = requests.ErrClaimLost

// KindRemoteLeaseExpired is the error kind of a remote step's attempt
// whose claim's lease ended.
const KindRemoteLeaseExpired = requests.KindRemoteLeaseExpired

// ReleaseRemote hands a claimed remote step back to its queue and rewinds
// what the claim wrote to its task's streams: see
// [requests.ReleaseRemote].
func ReleaseRemote(ctx context.Context, s store.Store, ref store.RemoteStepRef) error {
	return requests.ReleaseRemote(ctx, s, ref)
}

// SettleRemote records a remote step's outcome under its claim: see
// [requests.SettleRemote].
func SettleRemote(ctx context.Context, s store.Store, o RemoteOutcome) (recorded bool, err error) {
	return requests.SettleRemote(ctx, s, o)
}
