package sdk

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
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
	// over Pool (the embedded store of engine/sqlitestore, say). Schema is
	// then the store's own business; Metrics still counts (see Metrics).
	Store store.Store
	// Schema holding cairn's tables. Default pgstore.DefaultSchema ("cairn").
	Schema string
	// ListenURL, with Pool, is the connection string of the connection
	// that LISTENs for wake-ups (pgstore.Config.ListenURL): needed when Pool
	// goes through a pooler in transaction mode, which cannot carry LISTEN.
	// Default: Pool's own configuration.
	ListenURL string
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
	// DefaultRetention is how long after they finished the rescuer removes
	// tasks (whole, with their history) in a namespace without a retention
	// of its own (Client.SetNamespace). 0, the default: such namespaces
	// keep their tasks.
	DefaultRetention time.Duration
	// DefaultKeyRetention is how long a removed task's idempotency key stays
	// taken in a namespace without a key retention of its own. Default 24h.
	DefaultKeyRetention time.Duration
	// DefaultArchive is where the rescuer writes the histories of the
	// tasks it removes, first, in a namespace without an archive of its
	// own (file:///dir or s3://bucket/prefix, see [engine.CheckArchive]).
	// Empty: such tasks are removed without a copy.
	DefaultArchive string
	// WorkerID names this worker in leases and history. Default
	// host-pid-random.
	WorkerID string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts what this worker records (see [engine.NewMetrics]),
	// whatever the store: over Pool, or a Store the caller made. A Store
	// already made with the same Metrics (sqlitestore.Config.Metrics) is
	// counted once; one made with other metrics is refused, as each
	// event would be counted twice. Default nil: no metrics.
	Metrics *engine.Metrics
	// StopTimeout bounds the graceful stop that [Worker.Run], and a
	// cancelled [Worker.Start] context, perform: running steps get this
	// long to finish, then they are cancelled and their tasks released.
	// Default DefaultStopTimeout (30s). Keep it under the time your
	// platform waits between SIGTERM and SIGKILL (Kubernetes'
	// terminationGracePeriodSeconds, 30s by default).
	StopTimeout time.Duration
	// TracerProvider, when set, makes each attempt an OpenTelemetry span
	// (and each step a child span) under the trace the task was started
	// with (StartOpts.TraceID: a W3C traceparent or a trace id). Default
	// nil: no spans.
	TracerProvider trace.TracerProvider
	// Codec, when set, encrypts at rest the payloads of the namespaces it
	// has keys for: the worker opens the inputs and steps it replays and
	// seals what it records (see [Codec]). Default nil: a sealed input
	// fails its attempt with a message saying the keys are missing.
	Codec *Codec
	// MaxPayloadBytes bounds the JSON of each step's output and each
	// workflow's output: an attempt with one over it fails permanently
	// (error kind payload_too_large, dead-lettered unless the type skips
	// dead letters) and the output is not recorded. Default
	// [DefaultMaxPayloadBytes] (1 MiB), as [ClientConfig.MaxPayloadBytes];
	// negative is refused.
	MaxPayloadBytes int
	// MaxHistoryEvents bounds each task's history: a task whose history
	// reaches it fails permanently (kind history_too_large, dead-lettered
	// unless its type skips dead letters, compensated first if it has
	// compensable steps) rather than growing without end, each attempt
	// replaying more. Default [DefaultMaxHistoryEvents] (50,000);
	// negative: no bound.
	MaxHistoryEvents int
	// BlobStore, when set, is where the blobs this worker writes (step
	// outputs and workflow outputs over BlobThreshold, activities.PutBlob)
	// keep their bytes: a directory or an S3-compatible bucket
	// ([engine.CheckArchive]'s locations). Retention deletes them with
	// their tasks. Default: the database's blobs table.
	BlobStore string
	// BlobThreshold: a step's output of more bytes of JSON is kept in the
	// task's blobs (the database's blobs table) and the history records a
	// reference to it; replays, compensators and [Client.History] read it
	// back. Default [DefaultBlobThreshold] (64 KiB); negative: outputs stay
	// in the history. An output kept as a blob is bounded by
	// [engine.MaxBlobBytes] instead of MaxPayloadBytes.
	BlobThreshold int
}

// DefaultStopTimeout is [WorkerConfig.StopTimeout]'s default.
const DefaultStopTimeout = 30 * time.Second

// Worker runs registered workflow types. Register workflows, then Run (or
// Start, and Stop to shut down gracefully).
type Worker struct {
	cfg   WorkerConfig
	store store.Store

	mu        sync.Mutex
	types     map[store.TypeKey]registered // written by Register before Start; read by Start
	processor *engine.Processor
	notifier  *engine.Notifier
	rescuer   *engine.Rescuer
	// abandon ends the context the runtime runs on: the crash path, which
	// writes nothing more. Only tests take it (export_test.go); Start's
	// context stops the worker gracefully instead.
	abandon  context.CancelFunc
	startCtx context.Context // Start's: once it is done, a stop is bounded by StopTimeout

	stopOnce sync.Once
	stopping chan struct{} // closed when the first stop begins
	stopped  chan struct{} // closed when it is over; stopErr is then set
	stopErr  error
}

// registered is a workflow type as Register recorded it.
type registered struct {
	fn       interpreter.Func
	defaults workflowDefaults
}

// NewWorker returns a worker; it does nothing until started.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	st, err := sealedStore(cfg.Store, pgstore.Config{Pool: cfg.Pool, Schema: cfg.Schema, ListenURL: cfg.ListenURL}, cfg.Metrics, cfg.Codec, cfg.BlobStore)
	if err != nil {
		return nil, err
	}
	if err := validateWorkerConfig(&cfg); err != nil {
		return nil, err
	}
	switch {
	case cfg.BlobThreshold == 0:
		cfg.BlobThreshold = DefaultBlobThreshold
	case cfg.BlobThreshold < 0:
		cfg.BlobThreshold = 0
	}
	if cfg.MaxPayloadBytes, err = payloadLimit("worker: MaxPayloadBytes", cfg.MaxPayloadBytes); err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxHistoryEvents == 0:
		cfg.MaxHistoryEvents = DefaultMaxHistoryEvents
	case cfg.MaxHistoryEvents < 0:
		cfg.MaxHistoryEvents = 0
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
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	return &Worker{cfg: cfg, store: st, types: map[store.TypeKey]registered{},
		stopping: make(chan struct{}), stopped: make(chan struct{})}, nil
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
	if cfg.StopTimeout < 0 {
		return errors.Newf("worker: StopTimeout %s is negative", cfg.StopTimeout)
	}
	if cfg.DefaultRetention < 0 || cfg.DefaultKeyRetention < 0 {
		return errors.New("worker: DefaultRetention and DefaultKeyRetention must not be negative (0: none, and 24h)")
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

// Run starts the worker, runs tasks until ctx is done, then stops
// gracefully as [Worker.Stop] does, within [WorkerConfig.StopTimeout]:
// running steps finish and are recorded, and their tasks are handed back
// at the next step boundary (task_released) so another worker resumes them
// at once. A [Worker.Stop] call ends Run too. It returns nil after a
// clean stop, the error when the worker could not start, and an error
// matching context.DeadlineExceeded when steps outlived StopTimeout (they
// were cancelled, their tasks released).
//
// The shutdown on a signal is:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	if err := worker.Run(ctx); err != nil { ... }
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done(): // Start's watcher begins the stop
	case <-w.stopping: // a Stop call began it
	}
	<-w.stopped
	if w.stopErr != nil {
		return errors.Wrapf(w.stopErr, "worker: steps still ran when the stop timed out (StopTimeout %s); they were cancelled and their tasks released", w.cfg.StopTimeout)
	}
	return nil
}

// Start begins running tasks. It returns at once.
//
// Cancelling ctx stops the worker gracefully, as Run does: running steps
// get [WorkerConfig.StopTimeout] to finish, and their tasks are released
// (task_released), not left to their leases' expiry. [Worker.Stop] stops
// it sooner, with a timeout of its own. ctx's values (a trace, say) reach
// the runtime; its cancellation only starts the stop.
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
		types[k] = executor.Type{Func: reg.fn, Retry: reg.defaults.retry, SkipDeadLetter: reg.defaults.skipDeadLetter,
			MaxRunningChildren: reg.defaults.maxChildren}
	}
	handler := executor.NewHandler(executor.HandlerConfig{
		Types: types, WorkerID: w.cfg.WorkerID, Logger: w.cfg.Logger, TracerProvider: w.cfg.TracerProvider,
		MaxPayloadBytes: w.cfg.MaxPayloadBytes, BlobThreshold: w.cfg.BlobThreshold, MaxHistoryEvents: w.cfg.MaxHistoryEvents,
	})
	// Record the types so producers without this code (the HTTP API) can
	// start them with the definition's defaults.
	if err := w.registerTypes(ctx); err != nil {
		return err
	}
	// The runtime runs on a context of its own, so that cancelling ctx
	// hands tasks back (stopOnDone) instead of abandoning them as the
	// engine does when its context ends.
	runCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	started := false
	defer func() {
		if !started {
			abandon()
		}
	}()
	w.notifier = engine.NewNotifierWithOpts(w.store, engine.NotifierOpts{Logger: w.cfg.Logger, Metrics: w.cfg.Metrics})
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
			Retention: engine.RetentionConfig{Default: w.cfg.DefaultRetention, KeyDefault: w.cfg.DefaultKeyRetention,
				DefaultArchive: w.cfg.DefaultArchive},
		})
		if err != nil {
			return err
		}
		if err := w.rescuer.Start(runCtx); err != nil {
			return err
		}
	}
	if err := w.notifier.Start(runCtx); err != nil {
		return err
	}
	if err := processor.Start(runCtx); err != nil {
		return err
	}
	w.processor, w.abandon, w.startCtx, started = processor, abandon, ctx, true
	go w.stopOnDone(ctx, runCtx)
	return nil
}

// stopOnDone stops the worker gracefully, within StopTimeout, once ctx
// (Start's) is done. It returns early when a stop began otherwise, or the
// runtime was abandoned.
func (w *Worker) stopOnDone(ctx, runCtx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.stopping:
		return
	case <-runCtx.Done():
		return
	}
	_ = w.stop(context.WithoutCancel(ctx), false) // bounded by StopTimeout; Run reports its error
}

// Stop shuts the worker down gracefully: it stops claiming, lets running
// steps finish, and hands back tasks at their next step boundary
// (task_released) so another worker resumes them at once. When ctx is done
// first, it cancels running steps, releases their tasks, and returns
// ctx.Err(). Once Start's context is done, StopTimeout bounds the stop as
// well. A stop already under way (a second Stop, or the one a cancelled
// Start context began) goes on as it began; Stop then waits for it, until
// ctx is done, and returns nil.
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, false) }

// StopAndCancel shuts down at once: running steps are cancelled and their
// tasks released.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, true) }

func (w *Worker) stop(ctx context.Context, cancel bool) error {
	w.mu.Lock()
	processor, notifier, rescuer, abandon, startCtx := w.processor, w.notifier, w.rescuer, w.abandon, w.startCtx
	w.mu.Unlock()
	if processor == nil {
		return nil
	}
	first := false
	w.stopOnce.Do(func() { first = true; close(w.stopping) })
	if !first {
		select {
		case <-w.stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Once Start's context is done (before this stop, or while it runs: a
	// Stop without a deadline, then SIGTERM), StopTimeout bounds the stop,
	// whoever began it.
	bounded := newTimeoutCtx(ctx)
	defer bounded.release()
	defer boundAfter(startCtx, w.cfg.StopTimeout, bounded.expire)()
	ctx = bounded
	w.cfg.Logger.Info("worker: stopping: running steps may finish, then their tasks are released",
		"worker_id", w.cfg.WorkerID, "cancel_steps", cancel)
	var err error
	if cancel {
		err = processor.StopAndCancel(ctx)
	} else {
		err = processor.Stop(ctx)
	}
	if err != nil && bounded.expired() {
		err = context.DeadlineExceeded
	}
	notifier.Stop()
	if rescuer != nil {
		rescuer.Stop()
	}
	abandon() // everything has stopped: this only frees the context
	w.stopErr = err
	close(w.stopped)
	return err
}

// timeoutCtx is a stop's context: the caller's, and done as well once
// expire is called (StopTimeout ran out). It reads the caller's Done only
// when the stop first waits on it, as the processor's stop did with the
// caller's context: deriving a context would read it at once.
type timeoutCtx struct {
	context.Context
	once     sync.Once
	timeUp   chan struct{} // closed by expire
	finished chan struct{} // closed by release: the stop is over
	done     chan struct{}
	expireMu sync.Once
}

func newTimeoutCtx(ctx context.Context) *timeoutCtx {
	return &timeoutCtx{Context: ctx, timeUp: make(chan struct{}), finished: make(chan struct{}), done: make(chan struct{})}
}

func (c *timeoutCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		go func() {
			select {
			case <-c.Context.Done():
			case <-c.timeUp:
			case <-c.finished:
				return
			}
			close(c.done)
		}()
	})
	return c.done
}

func (c *timeoutCtx) Err() error {
	if c.expired() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

func (c *timeoutCtx) expire()  { c.expireMu.Do(func() { close(c.timeUp) }) }
func (c *timeoutCtx) release() { close(c.finished) }

func (c *timeoutCtx) expired() bool {
	select {
	case <-c.timeUp:
		return true
	default:
		return false
	}
}

// boundAfter calls expire d after ctx is done, unless the returned release
// is called first.
func boundAfter(ctx context.Context, d time.Duration, expire func()) (release func()) {
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	stopWatching := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			timer = time.AfterFunc(d, expire)
		}
	})
	return func() {
		stopWatching()
		mu.Lock()
		defer mu.Unlock()
		done = true
		if timer != nil {
			timer.Stop()
		}
	}
}

// WorkerID returns the id this worker records as lease owner.
func (w *Worker) WorkerID() string { return w.cfg.WorkerID }
