package sdk

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk/internal/edge"
	"github.com/cairnflow/cairn/sdk/internal/executor"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
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
	// Cells, when set, places namespaces on several databases (see
	// [Cells] and [pgstore.OpenCells]): the worker runs each of
	// its Namespaces in its cell's store, with a notifier and a rescuer
	// per cell, so a cell that is down stops only its namespaces. It
	// records its types in each cell in the background, so a cell out of
	// reach at Start delays only its own namespaces. Set it instead of
	// Pool and Store.
	Cells *Cells
	// Schema holding cairn's tables. Default pgstore.DefaultSchema ("cairn").
	Schema string
	// ListenURL, with Pool, is the connection string of the connection
	// that LISTENs for wake-ups (pgstore.Config.ListenURL): needed when Pool
	// goes through a pooler in transaction mode, which cannot carry LISTEN.
	// Default: Pool's own configuration.
	ListenURL string
	// Namespace whose tasks this worker runs. Default "default".
	Namespace string
	// Namespaces, instead of Namespace, are the namespaces whose tasks
	// this worker runs, each with its own claims and Concurrency slots
	// (a worker serving two namespaces runs up to twice Concurrency
	// tasks, and a busy namespace cannot take another's slots).
	Namespaces []string
	// Queues this worker serves. Default ["default"].
	Queues []string
	// Concurrency is how many tasks run at once. Default 10.
	Concurrency int
	// LeaseTTL is how long a claimed task stays leased without a
	// heartbeat; a crashed worker's tasks are picked up again after it.
	// Default [DefaultLeaseTTL] (30s).
	LeaseTTL time.Duration
	// HeartbeatInterval between lease renewals. Default LeaseTTL/3.
	HeartbeatInterval time.Duration
	// ExpectedFailover is the longest database failover this worker
	// should ride out with its running attempts intact: Start logs a
	// warning when the leases do not ([WorkerConfig.RideOut] is shorter).
	// Default [DefaultExpectedFailover] (30s) when the connection string
	// of Pool (or of a PostgreSQL Store's or cell's pool) names several
	// hosts, else no check; negative is refused. To silence the warning,
	// set it to your cluster's failover time, at most RideOut.
	ExpectedFailover time.Duration
	// PollInterval between claims when no notification arrives. Default 1s.
	PollInterval time.Duration
	// StrictPriority makes this worker's claims take due tasks in priority
	// order only. By default one claimed slot in eight goes to the
	// longest-waiting due task whatever its priority (aging); strict
	// priority gives that up, so a steady flow of high-priority work can
	// starve lower priorities indefinitely.
	StrictPriority bool
	// RescueInterval between passes of the rescuer, which reschedules
	// tasks whose lease expired (every worker's rescuer does, at the
	// lease's expiry, whether or not it leads) and, in the one that holds
	// the leader lease, expires start deadlines, fires cron schedules and
	// removes finished tasks. Default 5s, or LeaseTTL when shorter: a lease
	// taken just after a pass is seen at the next one, so an interval
	// longer than the shortest lease of any worker can delay a rescue by
	// the difference. Negative disables this worker's rescuer (another
	// process must run one).
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
	// own (file:///dir or s3://bucket/prefix, see [CheckArchive]).
	// Empty: such tasks are removed without a copy.
	DefaultArchive string
	// WorkerID names this worker in leases and history. Default
	// host-pid-random.
	WorkerID string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts what this worker records (see [NewMetrics]),
	// whatever the store: over Pool, or a Store the caller made. A Store
	// already made with the same Metrics (sqlitestore.Config.Metrics) is
	// counted once; one made with other metrics is refused, as each
	// event would be counted twice. Default nil: no metrics.
	Metrics *Metrics
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
	// Keys, when set, encrypt at rest the payloads of the namespaces they
	// have keys for: the worker opens the inputs and steps it replays and
	// seals what it records (see [seal.Keys]). Default nil: a sealed
	// input fails its attempt with a message saying the keys are missing.
	Keys *seal.Keys
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
	// ([CheckArchive]'s locations). Retention deletes them with
	// their tasks. Default: the database's blobs table.
	BlobStore string
	// BlobThreshold: a step's output of more bytes of JSON is kept in the
	// task's blobs (the database's blobs table) and the history records a
	// reference to it; replays, compensators and [Client.History] read it
	// back. Default [DefaultBlobThreshold] (64 KiB); negative: outputs stay
	// in the history. An output kept as a blob is bounded by
	// [payload.MaxBlobBytes] instead of MaxPayloadBytes.
	BlobThreshold int
	// DeployCheck is the check the worker makes when it starts, before it
	// claims anything: it replays the in-flight tasks of its types
	// against its code and skips (by default), refuses or ignores those
	// that would not replay. See [DeployCheckConfig].
	DeployCheck DeployCheckConfig
}

// DefaultStopTimeout is [WorkerConfig.StopTimeout]'s default.
const DefaultStopTimeout = 30 * time.Second

// DefaultLeaseTTL is [WorkerConfig.LeaseTTL]'s default: a crashed
// worker's tasks are picked up again about this long after it stopped
// renewing their leases.
const DefaultLeaseTTL = engine.DefaultLeaseTTL

// Worker runs registered workflow types. Register workflows, then Run (or
// Start, and Stop to shut down gracefully).
type Worker struct {
	cfg   WorkerConfig
	cells []*workerCell // by cell name; one, named "", without Cells

	mu          sync.Mutex
	types       map[store.TypeKey]registered // written by Register before Start; read by Start
	started     bool
	registering sync.WaitGroup // the background records of types (with Cells), until the stop
	// abandon ends the context the runtime runs on: the crash path, which
	// writes nothing more. Only tests take it (export_test.go); Start's
	// context stops the worker gracefully instead.
	abandon  context.CancelFunc
	startCtx context.Context // Start's: once it is done, a stop is bounded by StopTimeout
	// heldBackLinger and heldBackLingerFrom are the handler's
	// HeldBackLinger and HeldBackLingerFrom (0: its defaults); only tests
	// set them (export_test.go).
	heldBackLinger     time.Duration
	heldBackLingerFrom int

	// limiters are the cells' model limiters by namespace: written by
	// Start (buildCell) before any attempt runs, read by attempts.
	limiters map[string]*engine.ModelLimiter

	stranded  []StrandedTask // what the deploy check found at Start
	excluded  strandSet      // tasks the claims leave (DeploySkip)
	checkedAt time.Time      // when the deploy check began: tasks started before were in flight

	stopOnce sync.Once
	stopping chan struct{} // closed when the first stop begins
	stopped  chan struct{} // closed when it is over; stopErr is then set
	stopErr  error
}

// workerCell is the part of a worker that works in one store: a notifier,
// a maintainer (the rescuer and the leader's work) and a processor per
// namespace, set by Start.
type workerCell struct {
	name       string      // the cell's name; "" without Cells
	store      *edge.Store // the cell's store behind the worker's payload stage
	namespaces []string
	notifier   *engine.Notifier
	maintainer *engine.Maintainer
	processors []*engine.Processor
	inquirers  []*engine.Inquirer   // one per namespace: they answer queries about tasks of the worker's types
	limiter    *engine.ModelLimiter // the cell's model rate limits, for the steps of its namespaces
}

// registered is a workflow type as Register recorded it.
type registered struct {
	fn       interpreter.Func
	defaults workflowDefaults
}

// NewWorker returns a worker; it does nothing until started.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := validateWorkerConfig(&cfg); err != nil {
		return nil, err
	}
	cells, err := workerCells(cfg)
	if err != nil {
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
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	return &Worker{cfg: cfg, cells: cells, types: map[store.TypeKey]registered{},
		stopping: make(chan struct{}), stopped: make(chan struct{})}, nil
}

// workerCells groups the worker's namespaces by the store they run in:
// their cell's with Cells (sorted by cell name), else one store for all.
func workerCells(cfg WorkerConfig) ([]*workerCell, error) {
	if cfg.Cells == nil {
		st, err := workerStore(cfg, cfg.Store, pgstore.Config{Pool: cfg.Pool, Schema: cfg.Schema, ListenURL: cfg.ListenURL})
		if err != nil {
			return nil, err
		}
		return []*workerCell{{store: st, namespaces: cfg.Namespaces}}, nil
	}
	if err := cellsAlone(cfg.Store, cfg.Pool != nil, cfg.Schema, cfg.ListenURL); err != nil {
		return nil, errors.Wrap(err, "worker")
	}
	byName := map[string]*workerCell{}
	var cells []*workerCell
	for _, ns := range cfg.Namespaces {
		name, base, err := cfg.Cells.Of(ns)
		if err != nil {
			return nil, errors.Wrap(errmark.Mark(err, ErrInvalid), "worker")
		}
		c, ok := byName[name]
		if !ok {
			st, err := workerStore(cfg, base, pgstore.Config{})
			if err != nil {
				return nil, errors.Wrapf(err, "worker: cell %q", name)
			}
			c = &workerCell{name: name, store: st}
			byName[name] = c
			cells = append(cells, c)
		}
		c.namespaces = append(c.namespaces, ns)
	}
	slices.SortFunc(cells, func(a, b *workerCell) int { return strings.Compare(a.name, b.name) })
	return cells, nil
}

// workerStore is the store a worker's cell works in (st, else one over
// pg), behind the worker's payload stage: it keeps step outputs and
// workflow outputs over BlobThreshold by reference.
func workerStore(cfg WorkerConfig, st store.Store, pg pgstore.Config) (*edge.Store, error) {
	st, err := configuredStore(st, pg, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return newEdge(st, stageConfig{keys: cfg.Keys, blobStore: cfg.BlobStore, blobThreshold: blobThreshold(cfg.BlobThreshold),
		byReference: []payload.Kind{payload.StepOutput, payload.Output}})
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
	if cfg.ExpectedFailover < 0 {
		return errors.Newf("worker: ExpectedFailover %s is negative", cfg.ExpectedFailover)
	}
	if cfg.StopTimeout < 0 {
		return errors.Newf("worker: StopTimeout %s is negative", cfg.StopTimeout)
	}
	if err := workerNamespaces(cfg); err != nil {
		return err
	}
	if err := cfg.DeployCheck.validate(); err != nil {
		return err
	}
	if cfg.DefaultRetention < 0 || cfg.DefaultKeyRetention < 0 {
		return errors.New("worker: DefaultRetention and DefaultKeyRetention must not be negative (0: none, and 24h)")
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
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

// workerNamespaces checks Namespace and Namespaces and leaves the
// namespaces to run in Namespaces: Namespace, or "default", without a list.
func workerNamespaces(cfg *WorkerConfig) error {
	if len(cfg.Namespaces) == 0 {
		ns := cfg.Namespace
		if ns == "" {
			ns = store.DefaultNamespace
		}
		cfg.Namespaces = []string{ns}
	} else if cfg.Namespace != "" {
		return errors.Newf("worker: Namespace %q and Namespaces are both set: set one", cfg.Namespace)
	}
	seen := map[string]bool{}
	for _, ns := range cfg.Namespaces {
		if err := validateName("namespace", ns); err != nil {
			return errors.Wrap(err, "worker")
		}
		if seen[ns] {
			return errors.Newf("worker: Namespaces names %q twice", ns)
		}
		seen[ns] = true
	}
	cfg.Namespaces = slices.Clone(cfg.Namespaces)
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
	if w.started {
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
	if w.started {
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
		HeldBackLinger: w.heldBackLinger, HeldBackLingerFrom: w.heldBackLingerFrom,
		Strand:       w.strand,
		ModelLimiter: func(namespace string) *engine.ModelLimiter { return w.limiters[namespace] },
	})
	w.limiters = map[string]*engine.ModelLimiter{}
	// Record the types so producers without this code (the HTTP API) can
	// start them with the definition's defaults. In one store, Start
	// waits for it; across cells, each cell's record is made in the
	// background, so a cell out of reach holds up only its namespaces.
	records := w.typeRecords()
	if w.cfg.Cells == nil {
		if err := w.registerTypes(ctx, w.cells[0], records, false); err != nil {
			return err
		}
	}
	w.warnIfLeasesEndInAFailover()
	// The deploy check, before anything is claimed: a refusal leaves
	// nothing running.
	stranded, err := w.deployCheck(ctx)
	w.stranded = stranded
	if err != nil {
		return err
	}
	if w.cfg.DeployCheck.Policy == DeploySkip {
		for _, s := range stranded {
			if id, err := uuid.Parse(s.TaskID); err == nil && !w.excluded.add(id) {
				w.cfg.Logger.Error("worker: deploy check: more stranded tasks than a claim can leave; the rest will fail when claimed",
					"max", store.MaxClaimExclude)
				break
			}
		}
	}
	// Everything that can refuse its configuration is made before anything
	// starts, so a refusal leaves nothing running.
	for _, c := range w.cells {
		if err := w.buildCell(c, handler, keys); err != nil {
			for _, c := range w.cells {
				c.notifier, c.maintainer, c.processors, c.inquirers, c.limiter = nil, nil, nil, nil, nil // a later Start begins afresh
			}
			return err
		}
	}
	// The runtime runs on a context of its own, so that cancelling ctx
	// hands tasks back (stopOnDone) instead of abandoning them as the
	// engine does when its context ends.
	runCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	for _, c := range w.cells {
		w.startCell(runCtx, c)
		if w.cfg.Cells != nil {
			w.registering.Add(1)
			go func() {
				defer w.registering.Done()
				_ = w.registerTypes(runCtx, c, records, true)
			}()
		}
	}
	w.started, w.abandon, w.startCtx = true, abandon, ctx
	go w.stopOnDone(ctx, runCtx)
	return nil
}

// buildCell makes the runtime of one cell: its notifier, its maintainer,
// and a processor per namespace.
func (w *Worker) buildCell(c *workerCell, handler edge.Handler, keys []store.TypeKey) error {
	logger := w.cellLogger(c)
	st := c.store.Engine()
	c.notifier = engine.NewNotifier(st, &engine.NotifierOpts{Logger: logger, Metrics: w.cfg.Metrics})
	limiter, err := engine.NewModelLimiter(engine.ModelLimiterConfig{Store: st, Notifier: c.notifier, Owner: w.cfg.WorkerID,
		TicketTTL: w.leaseTTL(), Metrics: w.cfg.Metrics, Logger: logger})
	if err != nil {
		return err
	}
	c.limiter = limiter
	for _, ns := range c.namespaces {
		w.limiters[ns] = limiter
	}
	for _, ns := range c.namespaces {
		processor, err := engine.NewProcessor(engine.ProcessorConfig{
			Store: st, Notifier: c.notifier, Namespace: ns, Queues: w.cfg.Queues,
			Types: keys, Handler: c.store.Handler(handler), Concurrency: w.cfg.Concurrency, LeaseTTL: w.cfg.LeaseTTL,
			HeartbeatInterval: w.cfg.HeartbeatInterval, PollInterval: w.cfg.PollInterval,
			WorkerID: w.cfg.WorkerID, Logger: logger, StrictPriority: w.cfg.StrictPriority,
			Exclude: w.excluded.list,
		})
		if err != nil {
			return err
		}
		c.processors = append(c.processors, processor)
		inquirer, err := engine.NewInquirer(engine.InquirerConfig{
			Store: st, Notifier: c.notifier, Namespace: ns, Types: keys, Kinds: inquiryKinds, Handler: w.inquiryHandler(c.store),
			WorkerID: w.cfg.WorkerID, PollInterval: w.cfg.PollInterval, Logger: logger,
		})
		if err != nil {
			return err
		}
		c.inquirers = append(c.inquirers, inquirer)
	}
	if w.cfg.RescueInterval >= 0 {
		maintainer, err := engine.NewMaintainer(engine.MaintainerConfig{
			Store: st, Owner: w.cfg.WorkerID, Interval: w.rescueInterval(), Logger: logger,
			Retention: engine.RetentionConfig{Default: w.cfg.DefaultRetention, KeyDefault: w.cfg.DefaultKeyRetention,
				DefaultArchive: w.cfg.DefaultArchive},
		})
		if err != nil {
			return err
		}
		c.maintainer = maintainer
	}
	return nil
}

// leaseTTL is LeaseTTL with its default.
func (w *Worker) leaseTTL() time.Duration {
	if w.cfg.LeaseTTL > 0 {
		return w.cfg.LeaseTTL
	}
	return DefaultLeaseTTL
}

// rescueInterval is RescueInterval with its default: 5s, or LeaseTTL when
// shorter.
func (w *Worker) rescueInterval() time.Duration {
	if w.cfg.RescueInterval > 0 {
		return w.cfg.RescueInterval
	}
	ttl := w.cfg.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	return min(defaultRescueInterval, ttl)
}

// defaultRescueInterval is RescueInterval's default where leases are
// longer.
const defaultRescueInterval = 5 * time.Second

// startCell starts what buildCell made. Each Start refuses only a second
// start, which a built cell never had.
func (w *Worker) startCell(runCtx context.Context, c *workerCell) {
	if c.maintainer != nil {
		_ = c.maintainer.Start(runCtx)
	}
	_ = c.notifier.Start(runCtx)
	for _, p := range c.processors {
		_ = p.Start(runCtx)
	}
	for _, q := range c.inquirers {
		_ = q.Start(runCtx)
	}
}

// cellLogger is the worker's logger, naming the cell when there are cells.
func (w *Worker) cellLogger(c *workerCell) *slog.Logger {
	if c.name == "" {
		return w.cfg.Logger
	}
	return w.cfg.Logger.With("cell", c.name)
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
	started, abandon, startCtx := w.started, w.abandon, w.startCtx
	w.mu.Unlock()
	if !started {
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
	err := w.stopCells(ctx, cancel)
	if err != nil && bounded.expired() {
		err = context.DeadlineExceeded
	}
	abandon()            // everything has stopped: this only frees the context
	w.registering.Wait() // and ends the background records of types
	w.stopErr = err
	close(w.stopped)
	return err
}

// stopCells stops every cell at once, each on its own: its processors
// together (each lets its steps finish, unless cancel, within ctx), then
// its notifier and rescuer. A cell whose database is cut off, its claim
// stuck until the claim's timeout, so holds up only itself: the other
// cells' rescuers resign their leadership as soon as their processors are
// done. It returns the first processor's error.
func (w *Worker) stopCells(ctx context.Context, cancel bool) error {
	errs := make([]error, len(w.cells))
	var wg sync.WaitGroup
	for i, c := range w.cells {
		wg.Go(func() { errs[i] = c.stop(ctx, cancel) })
	}
	wg.Wait()
	return firstError(errs)
}

// stop stops the cell's processors at once, then its notifier and
// rescuer; it returns the first processor's error.
func (c *workerCell) stop(ctx context.Context, cancel bool) error {
	errs := make([]error, len(c.processors))
	var wg sync.WaitGroup
	for i, p := range c.processors {
		wg.Go(func() {
			if cancel {
				errs[i] = p.StopAndCancel(ctx)
			} else {
				errs[i] = p.Stop(ctx)
			}
		})
	}
	wg.Wait()
	for _, q := range c.inquirers {
		q.Stop()
	}
	if c.notifier != nil {
		c.notifier.Stop()
	}
	if c.maintainer != nil {
		c.maintainer.Stop()
	}
	return firstError(errs)
}

// firstError is the first of errs that is not nil, else nil.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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
