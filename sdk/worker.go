package sdk

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/executor"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// WorkerConfig configures a [Worker]. Zero values take the defaults named
// on each field.
type WorkerConfig struct {
	// Pool is the PostgreSQL connection pool. Required unless Store is
	// set.
	Pool *pgxpool.Pool
	// Store, when set, is the store to use in place of a PostgreSQL store
	// over Pool (the embedded store of engine/sqlitestore, say). Schema
	// and Metrics are then the store's own business.
	Store store.Store
	// Schema holding cairn's tables. Default pgstore.DefaultSchema ("cairn").
	Schema string
	// Namespace whose tasks this worker runs. Default "default".
	Namespace string
	// Queues this worker serves. Default ["default"].
	Queues []string
	// Concurrency is how many tasks run at once. Default 10.
	Concurrency int
	// LeaseTTL is how long a claimed task stays leased without a
	// heartbeat; a crashed worker's tasks are picked up again after it.
	// Default engine.DefaultLeaseTTL (30s).
	LeaseTTL time.Duration
	// HeartbeatInterval between lease renewals. Default LeaseTTL/3.
	HeartbeatInterval time.Duration
	// PollInterval between claims when no notification arrives. Default 1s.
	PollInterval time.Duration
	// StrictPriority makes this worker's claims take due tasks in priority
	// order only. By default one claimed slot in eight goes to the
	// longest-waiting due task whatever its priority (aging); strict
	// priority gives that up, so a steady flow of high-priority work can
	// starve lower priorities indefinitely.
	StrictPriority bool
	// RescueInterval between passes of the rescuer, which reschedules
	// tasks whose lease expired. Default 5s. Negative disables this
	// worker's rescuer (another process must run one).
	RescueInterval time.Duration
	// WorkerID names this worker in leases and history. Default
	// host-pid-random.
	WorkerID string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts what this worker records (see [engine.NewMetrics]).
	// Default nil: no metrics.
	Metrics *engine.Metrics
	// TracerProvider, when set, makes each attempt an OpenTelemetry span
	// (and each step a child span) under the trace the task was started
	// with (StartOpts.TraceID: a W3C traceparent or a trace id). Default
	// nil: no spans.
	TracerProvider trace.TracerProvider
}

// Worker runs registered workflow types. Register workflows, then Start;
// Stop shuts down gracefully.
type Worker struct {
	cfg   WorkerConfig
	store store.Store

	mu        sync.Mutex
	types     map[store.TypeKey]registered // written by Register before Start; read by Start
	processor *engine.Processor
	notifier  *engine.Notifier
	rescuer   *engine.Rescuer
}

// registered is a workflow type as Register recorded it.
type registered struct {
	fn       interpreter.Func
	defaults workflowDefaults
}

// NewWorker returns a worker; it does nothing until started.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	st, err := configuredStore(cfg.Store, cfg.Pool, cfg.Schema, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	if err := validateWorkerConfig(&cfg); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = engine.NewWorkerID()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = store.DefaultNamespace
	}
	return &Worker{cfg: cfg, store: st, types: map[store.TypeKey]registered{}}, nil
}

// validateWorkerConfig reports a bad setting when the worker is made, not
// when it starts.
func validateWorkerConfig(cfg *WorkerConfig) error {
	if cfg.Concurrency < 0 {
		return errors.Newf("worker: Concurrency %d is negative", cfg.Concurrency)
	}
	if cfg.LeaseTTL < 0 || cfg.HeartbeatInterval < 0 || cfg.PollInterval < 0 {
		return errors.New("worker: LeaseTTL, HeartbeatInterval and PollInterval must not be negative")
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = engine.DefaultLeaseTTL
	}
	if cfg.HeartbeatInterval >= ttl {
		return errors.Newf("worker: HeartbeatInterval %s must be shorter than LeaseTTL %s", cfg.HeartbeatInterval, ttl)
	}
	for _, q := range cfg.Queues {
		if err := validateName("queue", q); err != nil {
			return errors.Wrap(err, "worker")
		}
	}
	return nil
}

// Register adds a workflow type to w. It panics if the type and version are
// already registered or w has started; see [RegisterSafely].
func Register[In, Out any](w *Worker, wf *Workflow[In, Out]) {
	if err := RegisterSafely(w, wf); err != nil {
		panic(err)
	}
}

// RegisterSafely is [Register] returning an error instead of panicking.
// A worker claims only the types and versions registered with it, so a new
// version can roll out while old tasks finish on workers running old code.
func RegisterSafely[In, Out any](w *Worker, wf *Workflow[In, Out]) error {
	if wf == nil {
		return errors.New("register: workflow is nil")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.processor != nil {
		return errors.Newf("register %s@%d: worker already started", wf.name, wf.version)
	}
	key := store.TypeKey{Type: wf.name, Version: wf.version}
	if _, dup := w.types[key]; dup {
		return errors.Newf("register %s: already registered", key)
	}
	w.types[key] = registered{fn: interpreter.Typed(wf.fn), defaults: wf.defaults}
	return nil
}

// Start begins running tasks. It returns at once.
//
// Cancelling ctx abandons in-flight work as a crash would (their tasks are
// picked up elsewhere once their leases expire); use [Worker.Stop] to shut
// down gracefully.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.processor != nil {
		return errors.New("worker already started")
	}
	keys := make([]store.TypeKey, 0, len(w.types))
	types := make(map[store.TypeKey]executor.Type, len(w.types))
	for k, reg := range w.types {
		keys = append(keys, k)
		types[k] = executor.Type{Func: reg.fn, Retry: reg.defaults.retry, SkipDeadLetter: reg.defaults.skipDeadLetter}
	}
	handler := executor.NewHandler(executor.HandlerConfig{
		Types: types, WorkerID: w.cfg.WorkerID, Logger: w.cfg.Logger, TracerProvider: w.cfg.TracerProvider,
	})
	// Record the types so producers without this code (the HTTP API) can
	// start them with the definition's defaults.
	if err := w.registerTypes(ctx); err != nil {
		return err
	}
	w.notifier = engine.NewNotifier(w.store, w.cfg.Logger)
	processor, err := engine.NewProcessor(engine.ProcessorConfig{
		Store: w.store, Notifier: w.notifier, Namespace: w.cfg.Namespace, Queues: w.cfg.Queues,
		Types: keys, Handler: handler, Concurrency: w.cfg.Concurrency, LeaseTTL: w.cfg.LeaseTTL,
		HeartbeatInterval: w.cfg.HeartbeatInterval, PollInterval: w.cfg.PollInterval,
		WorkerID: w.cfg.WorkerID, Logger: w.cfg.Logger, StrictPriority: w.cfg.StrictPriority,
	})
	if err != nil {
		return err
	}
	if w.cfg.RescueInterval >= 0 {
		w.rescuer, err = engine.NewRescuer(engine.RescuerConfig{
			Store: w.store, Owner: w.cfg.WorkerID, Interval: w.cfg.RescueInterval, Logger: w.cfg.Logger,
		})
		if err != nil {
			return err
		}
		if err := w.rescuer.Start(ctx); err != nil {
			return err
		}
	}
	if err := w.notifier.Start(ctx); err != nil {
		return err
	}
	w.processor = processor
	return processor.Start(ctx)
}

// Stop shuts the worker down gracefully: it stops claiming, lets running
// steps finish, and hands back tasks at their next step boundary
// (task_released) so another worker resumes them at once. When ctx is done
// first, it cancels running steps, releases their tasks, and returns
// ctx.Err().
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, false) }

// StopAndCancel shuts down at once: running steps are cancelled and their
// tasks released.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, true) }

func (w *Worker) stop(ctx context.Context, cancel bool) error {
	w.mu.Lock()
	processor, notifier, rescuer := w.processor, w.notifier, w.rescuer
	w.mu.Unlock()
	if processor == nil {
		return nil
	}
	var err error
	if cancel {
		err = processor.StopAndCancel(ctx)
	} else {
		err = processor.Stop(ctx)
	}
	notifier.Stop()
	if rescuer != nil {
		rescuer.Stop()
	}
	return err
}

// WorkerID returns the id this worker records as lease owner.
func (w *Worker) WorkerID() string { return w.cfg.WorkerID }
