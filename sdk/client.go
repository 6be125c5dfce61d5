package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// ErrNotFound is returned (marked) for a task id that does not exist in the
// client's namespace.
var ErrNotFound = cairntype.ErrNotFound

// ErrIdempotencyKeyReused is returned (marked) by [Start], [StartTx],
// [Client.StartDynamic], [Client.StartDynamicTx] and [Client.StartMany] for a start whose idempotency key
// is taken by a task of another type or input (see
// [StartOpts.IdempotencyKey]). Nothing was written (in a StartMany, none of
// the batch), and the error names neither the task that holds the key nor
// its state. It is never returned for the same start repeated.
var ErrIdempotencyKeyReused = cairntype.ErrIdempotencyKeyReused

// ClientConfig configures a [Client].
type ClientConfig struct {
	// Pool is the PostgreSQL connection pool. Required unless Store is
	// set.
	Pool *pgxpool.Pool
	// Store, when set, is the store to use in place of a PostgreSQL store
	// over Pool (the embedded store of engine/sqlitestore, say). Schema is
	// then the store's own business; Metrics still counts (see Metrics).
	Store store.Store
	// Cells, when set, places namespaces on several databases (see
	// [Cells] and [pgstore.OpenCells]): the client works in the
	// store of its Namespace's cell, and a Namespace the placement does
	// not name is refused. Set it instead of Pool and Store.
	Cells *Cells
	// Schema holding cairn's tables. Default pgstore.DefaultSchema ("cairn").
	Schema string
	// ListenURL, with Pool, is the connection string of the connection
	// that LISTENs for wake-ups (pgstore.Config.ListenURL): needed when Pool
	// goes through a pooler in transaction mode, which cannot carry LISTEN.
	// Default: Pool's own configuration.
	ListenURL string
	// Namespace tasks are started in and looked up in. Default "default".
	Namespace string
	// Identity names who acts through this client in the history of the
	// tasks it retries (task_requeued's "by"). Default "sdk@<hostname>".
	Identity string
	// Metrics counts the events this client's requests write (a cancel,
	// a task cancelled before it ran; see [NewMetrics]), whatever the
	// store, as [WorkerConfig.Metrics] does. Default nil: no metrics.
	Metrics *Metrics
	// Notifier, when set, is a started notifier on the same schema that
	// Wait listens with, shared with other clients (a server with a client
	// per namespace holds one listening connection, not one each). The
	// client does not stop it. Default: the client starts its own on its
	// first Wait and stops it on Close.
	Notifier *Notifier
	// FilterLimits bound the work of each call with a filter ([ListOpts],
	// [DeadLetterOpts] and [AuditParams] Filter). Zero fields take the
	// defaults ([DefaultFilterTimeout], [DefaultFilterCost],
	// [DefaultFilterScan]).
	FilterLimits FilterLimits
	// MaxPayloadBytes bounds the JSON of a task's input kept in place (a
	// start's at most BlobThreshold, the rest going by reference; a
	// schedule's input always): a start over it fails with
	// [ErrPayloadTooLarge] and writes nothing. Default
	// [DefaultMaxPayloadBytes] (1 MiB); negative is refused. Give workers
	// the same bound for outputs ([WorkerConfig.MaxPayloadBytes]).
	MaxPayloadBytes int
	// DefaultArchive is where the histories of tasks retention removed
	// are read from in a namespace without an archive of its own (the
	// leader's default, [WorkerConfig.DefaultArchive]); see
	// [CheckArchive]. Empty: such tasks are not found once removed.
	DefaultArchive string
	// Archives, when set, are the archives to read through, shared with
	// other clients; default the client's own.
	Archives *Archives
	// Keys, when set, encrypt at rest the payloads of the namespaces they
	// have keys for (see [seal.Keys]): inputs are sealed before they are
	// sent, and everything the client reads is opened. Give the workers
	// and servers of those namespaces the same keys. Default nil: payloads
	// are stored as they are, and sealed ones read back sealed.
	Keys *seal.Keys
	// OutputsByReference makes Get and Wait return an output kept as a
	// blob (over the worker's BlobThreshold) as its {"cairn_blob": …}
	// reference instead of reading it: what the HTTP API answers, a link
	// to GET /v1/blobs/{key} rather than the bytes. Default false: the
	// output is read back and checked.
	OutputsByReference bool
	// BlobThreshold: a start's input of more bytes of JSON is kept as a
	// blob written with the task (in its transaction), and task_scheduled
	// records {"cairn_blob": ref} in its place, which workers read back
	// (checked) before the workflow runs. Such an input may hold up to
	// payload.MaxBlobBytes; MaxPayloadBytes bounds inputs kept in place (a
	// schedule's always are). Default [DefaultBlobThreshold] (64 KiB), as
	// [WorkerConfig.BlobThreshold]; negative: inputs stay in place.
	BlobThreshold int
	// BlobStore, when set, is where the blobs this client writes (inputs
	// and signal payloads kept by reference) keep their bytes: a directory
	// or an S3-compatible bucket, as [CheckArchive] takes it; the
	// database's blobs table then holds a row naming it. Blobs are read
	// from wherever their rows say. Default: the database.
	BlobStore string
	// Worker, when set, is a worker of this process: [Client.Query]
	// answers a query about a task of a type and version it registers
	// (for the client's namespace) itself, replaying the task with the
	// worker's code, rather than asking the workers through the
	// database. Default nil: every query asks the workers.
	Worker *Worker
	// QueryTimeout bounds how long [Client.Query] waits for a worker's
	// answer (and an in-process replay): a query not answered by then
	// fails with [ErrNoWorker]. Default [DefaultQueryTimeout] (10s); at
	// most [MaxQueryTimeout].
	QueryTimeout time.Duration
}

// Client starts tasks and asks about them. It is safe for concurrent use.
// A client that has waited for a task holds a listening connection until
// [Client.Close].
type Client struct {
	store          *edge.Store // the store behind the payload stage: its only writer of payloads
	keys           *seal.Keys  // ClientConfig.Keys; nil without
	namespace      string
	identity       string
	filterLimits   FilterLimits // with defaults filled
	maxPayload     int          // MaxPayloadBytes, default filled
	archives       *Archives
	defaultArchive string
	outputsByRef   bool
	blobThreshold  int      // 0: inputs stay in place
	metrics        *Metrics // ClientConfig.Metrics: counts the Wait listener's lost probes
	cells          *Cells   // ClientConfig.Cells; nil without
	cell           string   // the client's namespace's cell, with cells
	worker         *Worker  // ClientConfig.Worker: answers queries in process; nil without
	queryTimeout   time.Duration

	listenOnce sync.Once
	listener   *engine.Notifier // started by the first Wait; stopped by Close
	shared     bool             // listener is ClientConfig.Notifier: not ours to stop

	beforeForward func(run uuid.UUID) // tests: called before a signal is passed on to run
	onInquiry     func(id uuid.UUID)  // tests: called with each inquiry's id once it is written
	signalDecls   *signalDecls        // the signals the namespace's types declare, cached
}

// Close stops the client's listener, if a Wait started one. The pool is the
// caller's and stays open. A closed client's Wait falls back to polling.
func (c *Client) Close() {
	c.listenOnce.Do(func() {}) // a Wait after Close starts no listener
	if c.listener != nil && !c.shared {
		c.listener.Stop()
	}
}

// waitListener returns the shared listener for finished tasks, starting it
// on first use.
func (c *Client) waitListener() *engine.Notifier {
	c.listenOnce.Do(func() {
		n := engine.NewNotifier(c.store.Engine(), &engine.NotifierOpts{Metrics: c.metrics})
		if err := n.Start(context.Background()); err == nil {
			c.listener = n
		}
	})
	return c.listener
}

// NewClient returns a client. It does not touch the database.
func NewClient(cfg ClientConfig) (*Client, error) {
	ns := cfg.Namespace
	if ns == "" {
		ns = store.DefaultNamespace
	}
	if err := validateName("namespace", ns); err != nil {
		return nil, err
	}
	base, err := placedStore(cfg, ns)
	if err != nil {
		return nil, errors.Wrap(err, "client")
	}
	st, err := configuredStore(base, pgstore.Config{Pool: cfg.Pool, Schema: cfg.Schema, ListenURL: cfg.ListenURL}, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	identity := cfg.Identity
	if identity == "" {
		host, _ := os.Hostname()
		identity = "sdk@" + host
	}
	if err := cfg.FilterLimits.validate(); err != nil {
		return nil, err
	}
	maxPayload, err := payloadLimit("ClientConfig.MaxPayloadBytes", cfg.MaxPayloadBytes)
	if err != nil {
		return nil, err
	}
	if cfg.DefaultArchive != "" {
		if err := CheckArchive(cfg.DefaultArchive); err != nil {
			return nil, errors.Wrap(err, "ClientConfig.DefaultArchive")
		}
	}
	if cfg.Archives == nil {
		cfg.Archives = &Archives{}
	}
	switch {
	case cfg.QueryTimeout < 0 || cfg.QueryTimeout > MaxQueryTimeout:
		return nil, errors.Newf("client: QueryTimeout %s is outside 0..%s (0: %s)", cfg.QueryTimeout, MaxQueryTimeout, DefaultQueryTimeout)
	case cfg.QueryTimeout == 0:
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	c := &Client{keys: cfg.Keys, namespace: ns, identity: identity, filterLimits: cfg.FilterLimits.withDefaults(), maxPayload: maxPayload,
		archives: cfg.Archives, defaultArchive: cfg.DefaultArchive, outputsByRef: cfg.OutputsByReference,
		blobThreshold: blobThreshold(cfg.BlobThreshold), metrics: cfg.Metrics, cells: cfg.Cells, worker: cfg.Worker,
		queryTimeout: cfg.QueryTimeout, signalDecls: &signalDecls{}}
	// The client keeps inputs and signals by reference, and reads what it
	// no longer finds in the store from the archives.
	if c.store, err = newEdge(st, stageConfig{keys: cfg.Keys, blobStore: cfg.BlobStore, blobThreshold: c.blobThreshold,
		byReference: []payload.Kind{payload.Input, payload.Signal}, archivedBlob: c.archivedBlob}); err != nil {
		return nil, err
	}
	if cfg.Cells != nil {
		c.cell, _, _ = cfg.Cells.Of(ns) // placedStore found it
	}
	if cfg.Notifier != nil {
		c.listenOnce.Do(func() { c.listener, c.shared = cfg.Notifier.n, true })
	}
	return c, nil
}

// StartOpts are per-start options; nil, or the zero value, takes every
// default.
type StartOpts struct {
	// IdempotencyKey makes the start happen once per namespace: a second
	// start with the same key, the same workflow type and an input holding
	// the same JSON value (however its text orders members, spaces or writes
	// numbers) returns the first task's id with Existing set and creates
	// nothing. A start with the key and another type or input fails with
	// [ErrIdempotencyKeyReused]. The other options (queue, run time,
	// labels, version, …) are not compared: the first start's stand. Keys
	// are compared byte for byte, and must be valid UTF-8 without NUL,
	// not beginning with [ReservedKeyPrefix] ("cairn:").
	IdempotencyKey string
	// Queue overrides the workflow's queue.
	Queue string
	// Priority: higher runs first. Default 0.
	Priority int
	// RunAt delays the task until then. Default now.
	RunAt time.Time
	// Delay delays the task by this long. Ignored when RunAt is set.
	Delay time.Duration
	// MaxAttempts overrides the workflow's retry policy's limit.
	MaxAttempts int
	// TraceID links the task to the caller's trace.
	TraceID string
	// Deadline overrides the workflow's ScheduleToClose: the task is
	// dead-lettered rather than started or retried after it.
	Deadline time.Time
	// StartDeadline sheds load: a task not started by then ends expired
	// (task_expired) and never runs. Zero: none.
	StartDeadline time.Time
	// FairnessKey names who the task is for (a tenant, a user, a chat).
	// Within a queue, due tasks of one priority are served round robin
	// across keys: one key's flood does not hold back another key's task.
	// Tasks without a key go by run time.
	FairnessKey string
	// FairnessWeight gives the key this many turns for each turn of a key
	// of weight 1 (1 to 1000). Zero means 1.
	FairnessWeight int
	// Labels are string key/values stored with the task (in
	// task_scheduled): a scenario, a model, a tenant. Task filters and
	// audit queries see them. At most 32; keys are 1 to 64 letters, digits,
	// '_', '.', '-' or '/'; values at most 256 bytes.
	Labels map[string]string
	// Budget caps what the task and its descendants may spend on AI
	// models over their lives (its Window must be 0); it replaces the
	// workflow's WorkflowOpts.Budget. Scope budgets (Client.SetBudget)
	// apply as well. See [Budget].
	Budget *Budget
}

// StartResult identifies the task a start refers to.
type StartResult struct {
	ID uuid.UUID
	// Existing is true when the idempotency key was already used: ID is the
	// task that used it, and nothing was created.
	Existing bool
}

// StartDynamic persists a task of workflow type wf with input, and returns
// its id once it is committed: the untyped start, for callers that know a
// workflow only by name and have its input as data (the HTTP server, the
// CLI, a bench). Go code holding a *[Workflow] uses [Start], which checks
// the input's type when it compiles; nothing here does, so an input of the
// wrong shape is found only when a worker decodes it (bad_input).
//
// input is encoded as JSON; a [json.RawMessage] is taken as it is. Input
// that the stores would not keep alike is refused with [ErrInvalid] naming
// the field: a string (or member name) that is not valid UTF-8 or holds a
// lone surrogate escape, a member named twice, a number beyond 1000 digits
// or an exponent beyond ±1000. opts nil takes every default.
func (c *Client) StartDynamic(ctx context.Context, wf WorkflowRef, input any, opts *StartOpts) (StartResult, error) {
	p, err := c.startParams(wf, input, opts)
	if err != nil {
		return StartResult{}, err
	}
	res, err := c.store.Start(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return StartResult{}, err
	}
	return StartResult(res[0]), nil
}

// StartDynamicTx is [Client.StartDynamic] inside the caller's transaction
// (the outbox pattern): the task exists, and workers hear of it, only if tx
// commits. It needs the PostgreSQL store; on another it fails with an
// error marked [cairntype.ErrUnsupported]. [StartTx] is the typed form.
func (c *Client) StartDynamicTx(ctx context.Context, tx pgx.Tx, wf WorkflowRef, input any, opts *StartOpts) (StartResult, error) {
	if _, ok := c.store.Engine().(*pgstore.Store); !ok {
		return StartResult{}, errmark.Mark(errors.Newf("StartDynamicTx: a pgx transaction needs the PostgreSQL store, not %T", c.store.Engine()), store.ErrUnsupported)
	}
	p, err := c.startParams(wf, input, opts)
	if err != nil {
		return StartResult{}, err
	}
	res, err := c.store.StartTx(ctx, tx, p)
	return StartResult(res), err
}

// ErrInvalid is returned (marked) for a request whose arguments are
// invalid (a start's workflow reference, input or options; a diagnosis
// window); the message says what was wrong. Nothing was written.
var ErrInvalid = errors.New("invalid request")

func (c *Client) startParams(wf WorkflowRef, input any, opts *StartOpts) (*store.TaskStartParams, error) {
	// A copy: the params keep pointers into it (the deadlines).
	o := orZero(opts)
	p, err := c.checkedStartParams(wf, input, &o)
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	return p, nil
}

func (c *Client) checkedStartParams(wf WorkflowRef, input any, opts *StartOpts) (*store.TaskStartParams, error) {
	if opts == nil {
		opts = &StartOpts{}
	}
	if wf == nil {
		return nil, errors.New("start: workflow is nil")
	}
	if err := validateTypeName(wf.TypeName()); err != nil {
		return nil, err
	}
	if wf.TypeVersion() < 1 {
		return nil, errors.Newf("start %s: version %d must be at least 1", wf.TypeName(), wf.TypeVersion())
	}
	defaults := workflowDefaults{queue: "default", retry: activities.DefaultRetryPolicy}
	if d, ok := wf.(hasDefaults); ok {
		defaults = d.typeDefaults()
	}
	queue, retry := defaults.queue, defaults.retry
	if opts.Queue != "" {
		queue = opts.Queue
	}
	if err := validateName("queue", queue); err != nil {
		return nil, errors.Wrapf(err, "start %s", wf.TypeName())
	}
	for _, k := range []struct{ what, value string }{
		{"idempotency key", opts.IdempotencyKey}, {"trace id", opts.TraceID}, {"fairness key", opts.FairnessKey},
	} {
		if err := checkKey(k.what, k.value); err != nil {
			return nil, errors.Wrapf(err, "start %s", wf.TypeName())
		}
	}
	if strings.HasPrefix(opts.IdempotencyKey, ReservedKeyPrefix) {
		return nil, errors.Newf("start %s: idempotency key %q: the prefix %q is cairn's own (a child's key is derived from its parent and position); choose another",
			wf.TypeName(), opts.IdempotencyKey, ReservedKeyPrefix)
	}
	// Stored as PostgreSQL integers: a larger value would wrap, and the
	// row would no longer equal the history.
	if opts.Priority < math.MinInt32 || opts.Priority > math.MaxInt32 {
		return nil, errors.Newf("start %s: Priority %d is outside the 32-bit range", wf.TypeName(), opts.Priority)
	}
	maxAttempts := retry.MaxAttempts
	if opts.MaxAttempts < 0 || opts.MaxAttempts > math.MaxInt32 {
		return nil, errors.Newf("start %s: MaxAttempts %d is outside 0..%d", wf.TypeName(), opts.MaxAttempts, math.MaxInt32)
	}
	if opts.MaxAttempts > 0 {
		maxAttempts = opts.MaxAttempts
	}
	// A type registered without a budget gets the default: a start always
	// records one.
	maxAttempts = history.AttemptBudget(maxAttempts)
	var raw json.RawMessage
	if r, ok := input.(json.RawMessage); ok {
		if !json.Valid(r) {
			return nil, errors.Newf("start %s: input is not valid JSON", wf.TypeName())
		}
		raw = r
		if err := jsoncheck.Check(raw, "input"); err != nil {
			return nil, errors.Wrapf(err, "start %s", wf.TypeName())
		}
	} else {
		var err error
		if raw, err = json.Marshal(input); err != nil {
			return nil, errors.Wrapf(err, "start %s: encode input", wf.TypeName())
		}
		if err := jsoncheck.CheckMarshaled(raw, "input"); err != nil {
			return nil, errors.Wrapf(err, "start %s", wf.TypeName())
		}
	}
	if err := checkReserved("input", raw); err != nil {
		return nil, errors.Wrapf(err, "start %s", wf.TypeName())
	}
	limit := c.maxPayload
	if c.blobThreshold > 0 && len(raw) > c.blobThreshold {
		limit = payload.MaxBlobBytes // kept by reference by the payload stage, unless a schedule's (CreateSchedule checks again)
	}
	if err := checkPayloadSize("input", raw, limit); err != nil {
		return nil, errors.Wrapf(err, "start %s", wf.TypeName())
	}
	if interpreter.HasNULEscape(raw) {
		return nil, errors.Newf("start %s: input contains the character U+0000, which PostgreSQL cannot store in JSON", wf.TypeName())
	}
	runAt := opts.RunAt
	if runAt.IsZero() && opts.Delay > 0 {
		runAt = time.Now().Add(opts.Delay)
	}
	// The deadline must leave the task a chance to run: it must come after
	// its run time, and after now.
	earliest := time.Now()
	if runAt.After(earliest) {
		earliest = runAt
	}
	var deadline *time.Time
	switch {
	case !opts.Deadline.IsZero():
		if !opts.Deadline.After(earliest) {
			return nil, errors.Newf("start %s: Deadline %s is not after the task's run time %s", wf.TypeName(),
				opts.Deadline.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
		}
		deadline = &opts.Deadline
	case defaults.scheduleToClose > 0:
		d := time.Now().Add(defaults.scheduleToClose)
		if !d.After(earliest) {
			return nil, errors.Newf("start %s: the workflow's ScheduleToClose of %s ends before the task's run time %s; set StartOpts.Deadline",
				wf.TypeName(), defaults.scheduleToClose, earliest.Format(time.RFC3339Nano))
		}
		deadline = &d
	}
	var startDeadline *time.Time
	if !opts.StartDeadline.IsZero() {
		if !opts.StartDeadline.After(earliest) {
			return nil, errors.Newf("start %s: StartDeadline %s is not after the task's run time %s", wf.TypeName(),
				opts.StartDeadline.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
		}
		startDeadline = &opts.StartDeadline
	}
	if opts.FairnessWeight < 0 || opts.FairnessWeight > history.MaxFairnessWeight {
		return nil, errors.Newf("start %s: FairnessWeight %d is outside 0..%d", wf.TypeName(), opts.FairnessWeight, history.MaxFairnessWeight)
	}
	if opts.FairnessWeight != 0 && opts.FairnessKey == "" {
		return nil, errors.Newf("start %s: FairnessWeight %d needs a FairnessKey", wf.TypeName(), opts.FairnessWeight)
	}
	if err := validateLabels(opts.Labels); err != nil {
		return nil, errors.Wrapf(err, "start %s", wf.TypeName())
	}
	budget := defaults.budget
	if opts.Budget != nil {
		var err error
		if budget, err = taskBudget(opts.Budget); err != nil {
			return nil, errors.Wrapf(err, "start %s", wf.TypeName())
		}
	}
	return &store.TaskStartParams{Namespace: c.namespace, RefuseKeyReuse: true, Scheduled: history.TaskScheduledData{
		TaskType: wf.TypeName(), TypeVersion: wf.TypeVersion(), Queue: queue, Priority: opts.Priority,
		Input: raw, RunAt: runAt, IdempotencyKey: opts.IdempotencyKey, TraceID: opts.TraceID,
		MaxAttempts: maxAttempts, Deadline: deadline, StartDeadline: startDeadline,
		FairnessKey: opts.FairnessKey, FairnessWeight: opts.FairnessWeight, Labels: opts.Labels, Budget: budget,
	}}, nil
}

// ReservedKeyPrefix begins the idempotency keys cairn gives the tasks it
// starts itself (a child's: "cairn:child:<parent>:<position>"); a start
// with a key that begins with it is refused ([ErrInvalid]), so no one can
// take a key a parent's child will need.
const ReservedKeyPrefix = "cairn:"

// maxKeyLen bounds idempotency keys, trace ids and fairness keys, which
// are indexed or stored on every row.
const maxKeyLen = 512

// checkKey refuses a key PostgreSQL could not store (a NUL, invalid
// UTF-8) or that is too long.
func checkKey(what, key string) error {
	switch {
	case len(key) > maxKeyLen:
		return errors.Newf("%s is %d bytes, at most %d allowed", what, len(key), maxKeyLen)
	case !validText(key):
		return errors.Newf("%s is not valid UTF-8 text without NUL characters", what)
	}
	return nil
}

// validText is text both stores keep as given: PostgreSQL refuses invalid
// UTF-8 and NUL in text, and the embedded store would keep them.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// Label limits: labels ride in every task_scheduled and in filters.
const (
	maxLabels        = 32
	maxLabelValueLen = 256
)

func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return errors.Newf("%d labels, at most %d allowed", len(labels), maxLabels)
	}
	for k, v := range labels {
		if !history.IsLabelKey(k) {
			return errors.Newf("label key %q: use 1 to %d letters, digits, '_', '.', '-' or '/'", k, history.MaxLabelKeyLen)
		}
		if len(v) > maxLabelValueLen {
			return errors.Newf("label %s: value is %d bytes, at most %d allowed", k, len(v), maxLabelValueLen)
		}
		if !validText(v) {
			return errors.Newf("label %s: value is not valid UTF-8 text without NUL characters", k)
		}
	}
	return nil
}

// TaskInfo is what a client can learn about a task.
type TaskInfo struct {
	ID             uuid.UUID          `json:"id"`
	Namespace      string             `json:"namespace"`
	Type           string             `json:"type"`
	TypeVersion    int                `json:"type_version"`
	Queue          string             `json:"queue"`
	Status         history.Status     `json:"status"`
	Priority       int                `json:"priority"`
	Attempt        int                `json:"attempt"`
	MaxAttempts    int                `json:"max_attempts"`
	IdempotencyKey string             `json:"idempotency_key,omitempty"`
	TraceID        string             `json:"trace_id,omitempty"`
	Input          json.RawMessage    `json:"input,omitempty"`
	Output         json.RawMessage    `json:"output"`
	LastError      *history.ErrorInfo `json:"last_error"`
	LeaseOwner     string             `json:"lease_owner,omitempty"`
	RunAt          time.Time          `json:"run_at"`
	CreatedAt      time.Time          `json:"created_at"`
	UpdatedAt      time.Time          `json:"updated_at"`
	StartedAt      *time.Time         `json:"started_at"`
	FinishedAt     *time.Time         `json:"finished_at"`
	Deadline       *time.Time         `json:"deadline,omitempty"`
	StartDeadline  *time.Time         `json:"start_deadline,omitempty"`
	Labels         map[string]string  `json:"labels,omitempty"`
	FairnessKey    string             `json:"fairness_key,omitempty"`
	FairnessWeight int                `json:"fairness_weight,omitempty"`
	// ParentID is the task that started this one as its child
	// (workflow.StartChild), at ParentPosition among its children; nil
	// for a task started on its own.
	ParentID       *uuid.UUID `json:"parent_id,omitempty"`
	ParentPosition int        `json:"parent_position,omitempty"`
	// ContinuedFrom is the run this task continues as new
	// (workflow.ContinueAsNew), ContinuedAs the run it continued as, when
	// it ended continued; nil otherwise. Get reads them from the task's
	// history; Wait sets ContinuedFrom of the run it returns when it
	// followed a chain to it; List leaves them nil.
	ContinuedFrom *uuid.UUID `json:"continued_from,omitempty"`
	ContinuedAs   *uuid.UUID `json:"continued_as,omitempty"`
	// ForkedFrom, on a fork ([Client.Fork]), names the task it was
	// forked from and the step position; nil otherwise. Get reads it
	// from the task's history, as Wait does; listings leave it nil.
	ForkedFrom *history.ForkOrigin `json:"forked_from,omitempty"`
	// Waiting says what a pending task waits for (a signal, its
	// children, a timer) when its workflow is in a wait; nil otherwise.
	// Get and List read it from the task's history.
	Waiting *Waiting `json:"waiting,omitempty"`

	lastSeq int64 // the history's length, where its wait is looked for
}

func taskInfo(t *store.Task) *TaskInfo {
	return &TaskInfo{
		ID: t.ID, Namespace: t.Namespace, Type: t.Type, TypeVersion: t.TypeVersion, Queue: t.Queue,
		Status: t.Status, Priority: t.Priority, Attempt: t.Attempt, MaxAttempts: history.AttemptBudget(t.MaxAttempts),
		IdempotencyKey: t.IdempotencyKey, TraceID: t.TraceID, Input: t.Input, Output: t.Output,
		LastError: t.LastError, LeaseOwner: t.LeaseOwner, RunAt: t.RunAt, CreatedAt: t.CreatedAt,
		UpdatedAt: t.UpdatedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Deadline: t.Deadline,
		StartDeadline: t.StartDeadline,
		Labels:        t.Labels, FairnessKey: t.FairnessKey, FairnessWeight: t.FairnessWeight,
		ParentID: parentOf(t), ParentPosition: t.ParentPosition, lastSeq: t.LastSeq,
	}
}

func parentOf(t *store.Task) *uuid.UUID {
	if t.ParentID == uuid.Nil {
		return nil
	}
	id := t.ParentID
	return &id
}

// Get returns a task's current state. A task id not in the client's
// namespace is [ErrNotFound].
func (c *Client) Get(ctx context.Context, id uuid.UUID) (*TaskInfo, error) {
	info, err := c.getStored(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.setWaiting(ctx, []*TaskInfo{info}, waitScanOne); err != nil {
		return nil, err
	}
	if err := c.setChainLinks(ctx, info); err != nil {
		return nil, err
	}
	return c.resolved(ctx, info)
}

// CurrentRun is [Client.Get] of the current run of the chain of runs
// task id belongs to (workflow.ContinueAsNew): id's own run when it did
// not continue as new, else the run its chain continued as, last,
// following at most [engine.MaxChainHops] runs (past that, an error marked
// engine.ErrChainTooLong: use a later run's id).
func (c *Client) CurrentRun(ctx context.Context, id uuid.UUID) (*TaskInfo, error) {
	latest, err := engine.LatestRun(ctx, c.store.Engine(), c.namespace, id)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, latest.ID)
}

// setChainLinks fills info's ContinuedFrom and ForkedFrom (from its
// task_scheduled) and ContinuedAs (from its task_continued, when it ended
// continued).
func (c *Client) setChainLinks(ctx context.Context, info *TaskInfo) error {
	sc, err := c.scheduledOf(ctx, info.Namespace, info.ID)
	if err != nil {
		return err
	}
	if sc != nil {
		if from, err := uuid.Parse(sc.ContinuedFrom); err == nil && sc.ContinuedFrom != "" {
			info.ContinuedFrom = &from
		}
		info.ForkedFrom = sc.ForkedFrom
	}
	if info.Status != history.StatusContinued {
		return nil
	}
	next, err := engine.ContinuedAs(ctx, c.store.Engine(), &store.Task{ID: info.ID, Namespace: info.Namespace, Status: info.Status, LastSeq: info.lastSeq})
	if err != nil {
		return err
	}
	info.ContinuedAs = &next
	return nil
}

// getStored is Get without decoding the payloads: they are as stored.
func (c *Client) getStored(ctx context.Context, id uuid.UUID) (*TaskInfo, error) {
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: id})
	if err != nil {
		return nil, err
	}
	return taskInfo(t), nil
}

// resolved is info with its input and output decoded: opened, and read
// back when they are kept by reference (unless the client answers
// references). A reference whose blob is gone (removed with its task),
// shredded (an erased task's) or another task's (forged) stays as it is.
func (c *Client) resolved(ctx context.Context, info *TaskInfo) (*TaskInfo, error) {
	return c.decodeInfo(ctx, info, c.outputsByRef)
}

// opened is info with its input and output opened, references left as
// they are stored.
func (c *Client) opened(ctx context.Context, info *TaskInfo) (*TaskInfo, error) {
	return c.decodeInfo(ctx, info, true)
}

func (c *Client) decodeInfo(ctx context.Context, info *TaskInfo, keepRefs bool) (*TaskInfo, error) {
	id := info.ID
	out := &payload.Payload{Namespace: info.Namespace, Task: id, Kind: payload.Output, Data: info.Output, KeepRefs: keepRefs}
	in := &payload.Payload{Namespace: info.Namespace, Task: id, Kind: payload.Input, Data: info.Input, KeepRefs: keepRefs}
	if err := c.store.Decode(ctx, []*payload.Payload{out, in}); err != nil {
		return nil, err
	}
	if err := unresolved(out.Err); err != nil {
		return nil, errors.Wrapf(err, "the output of task %s", id)
	}
	if err := unresolved(in.Err); err != nil {
		return nil, errors.Wrapf(err, "the input of task %s", id)
	}
	info.Output, info.Input = out.Data, in.Data
	return info, nil
}

// unresolved is the error a read reports for a payload's reference that
// could not be read back: nil when its blob is gone (removed with its
// task), shredded (an erased task's) or another task's (forged), which
// leave the reference as it is.
func unresolved(err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, payload.ErrSealed) {
		return nil
	}
	return err
}

// Wait returns the task once it is finished (completed, failed, cancelled
// or dead-lettered), or ctx's error when ctx is done first. A task that
// continued as new (workflow.ContinueAsNew) is followed to its chain's
// current run (from the run it continued as, at most [engine.MaxChainHops]
// runs: a longer chain is an error marked engine.ErrChainTooLong, use a
// later run's id), and Wait waits on that run, again each time the run it
// waits on continues; it returns the last run (its ID is the last run's,
// ContinuedFrom the run before). It learns of
// the finish from a notification, so it returns within milliseconds of the
// outcome being committed. It reads the task when it starts, on each
// notification, and, while notifications are not arriving (the notifier
// is not live: no listener, or its probe did not come back), every second
// at most; once they arrive again it reads once more, for a finish
// announced meanwhile. A live notifier re-reads nothing on its own: a
// thousand idle waits cost the database nothing.
func (c *Client) Wait(ctx context.Context, id uuid.UUID) (*TaskInfo, error) {
	var from uuid.UUID // the run before the one waited on, when known
	jumped := false    // LatestRun skipped runs: from is read at the end
	for first := true; ; first = false {
		// The first run is waited on as it is (the wait reads it anyway:
		// a task that never continued costs no read more); once one has
		// continued, LatestRun jumps to the chain's current run.
		if !first {
			latest, err := engine.LatestRun(ctx, c.store.Engine(), c.namespace, id)
			if err != nil {
				return nil, err
			}
			if latest.ID != id {
				from, jumped, id = uuid.Nil, true, latest.ID
			}
		}
		info, next, err := c.waitRun(ctx, id)
		if err != nil || next == uuid.Nil {
			if err == nil && jumped && from == uuid.Nil {
				if from, err = c.continuedFrom(ctx, info.ID); err != nil {
					return nil, err
				}
			}
			if info != nil && from != uuid.Nil {
				info.ContinuedFrom = &from
			}
			return info, err
		}
		from, id = id, next
	}
}

// continuedFrom reads the run task id continued, from its task_scheduled:
// uuid.Nil when it continues none.
func (c *Client) continuedFrom(ctx context.Context, id uuid.UUID) (uuid.UUID, error) {
	sc, err := c.scheduledOf(ctx, c.namespace, id)
	if err != nil || sc == nil || sc.ContinuedFrom == "" {
		return uuid.Nil, err
	}
	return uuid.Parse(sc.ContinuedFrom)
}

// scheduledOf reads task id's first event, its task_scheduled, whose
// links (continued_from, forked_from) the tasks row does not keep: nil
// when the history has none.
func (c *Client) scheduledOf(ctx context.Context, namespace string, id uuid.UUID) (*history.TaskScheduledData, error) {
	// MaxBytes 1: a page holds one event whatever its size.
	events, err := c.store.EventListPage(ctx, &store.EventPageParams{Namespace: namespace, TaskID: id, Limit: 1, MaxBytes: 1})
	if err != nil || len(events) == 0 {
		return nil, err
	}
	if sc, ok := events[0].Data.(history.TaskScheduledData); ok {
		return &sc, nil
	}
	return nil, nil
}

// waitRun is Wait on one run: it returns the run it continued as, when it
// did, instead of the run.
func (c *Client) waitRun(ctx context.Context, id uuid.UUID) (*TaskInfo, uuid.UUID, error) {
	var finished <-chan struct{}
	interval := 5 * time.Millisecond
	l := c.waitListener()
	if l != nil {
		ch, stop := l.WaitFor(id)
		defer stop()
		finished = ch
	}
	live := func() bool { return l != nil && l.Live() }
	wasLive := live()
	if wasLive {
		interval = 100 * time.Millisecond // only a look at the notifier
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	var info *TaskInfo
	for read := true; ; {
		if read {
			// The payloads are read back once, at the end, not at every
			// read.
			var err error
			if info, err = c.getStored(ctx, id); err != nil {
				return nil, uuid.Nil, err
			}
			if info.Status == history.StatusContinued {
				next, err := engine.ContinuedAs(ctx, c.store.Engine(), &store.Task{ID: info.ID, Namespace: info.Namespace, Status: info.Status, LastSeq: info.lastSeq})
				return nil, next, err
			}
			if info.Status.Terminal() {
				if info.ForkedFrom, err = c.forkedFrom(ctx, id); err != nil {
					return nil, uuid.Nil, err
				}
				info, err = c.resolved(ctx, info)
				return info, uuid.Nil, err
			}
		}
		select {
		case <-ctx.Done():
			// Not finished: no output to read back, the input opened (past
			// the caller's end: a key read, at most).
			if opened, err := c.opened(context.WithoutCancel(ctx), info); err == nil {
				info = opened
			}
			return info, uuid.Nil, ctx.Err()
		case <-finished:
			read = true
		case <-timer.C:
			interval = min(2*interval, time.Second)
			now := live()
			read = !now || !wasLive
			wasLive = now
		}
		timer.Reset(interval)
	}
}

// History returns every event of a task, in order, with the step outputs
// the history keeps by reference (StepCompletedData.OutputRef) read back
// into Output (the reference then cleared); a blob that is gone (its task removed) stays a reference,
// a damaged one is an error marked [ErrBlobCorrupt]. A task retention
// removed is read from its namespace's archive (or the client's
// DefaultArchive), when it was archived. It holds the whole history in
// memory: [Client.HistoryPage] reads one page at a time.
func (c *Client) History(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	var all []history.Event
	err := c.historyPages(ctx, id, 0, false, func(events []history.Event) error {
		all = append(all, events...)
		return nil
	})
	return all, err
}

// RawHistory is [Client.History] with the references left as they are
// stored: what the HTTP API answers (a reference's key downloads it from
// GET /v1/blobs/{key}). It reads the history page by page
// ([Client.RawHistoryPage]), each page one statement.
func (c *Client) RawHistory(ctx context.Context, id uuid.UUID) ([]history.Event, error) {
	var all []history.Event
	err := c.RawHistoryPages(ctx, id, 0, func(events []history.Event) error {
		all = append(all, events...)
		return nil
	})
	return all, err
}

// RawHistoryPages calls fn with each page of a task's history, in order,
// as [Client.RawHistoryPage] reads them: each within maxBytes of event
// data (0: [DefaultHistoryPageBytes]). fn's error ends the reading and is
// returned. The events a page asks for follow the sizes of the last
// page's, so a page its byte bound cuts short costs the store one event
// more than it holds, not a page more.
func (c *Client) RawHistoryPages(ctx context.Context, id uuid.UUID, maxBytes int64, fn func(events []history.Event) error) error {
	return c.historyPages(ctx, id, maxBytes, true, fn)
}

// historyPages is RawHistoryPages, references read back unless keepRefs.
func (c *Client) historyPages(ctx context.Context, id uuid.UUID, maxBytes int64, keepRefs bool, fn func(events []history.Event) error) error {
	opts := HistoryPageOpts{MaxBytes: maxBytes, Limit: DefaultHistoryPageLimit}
	for {
		page, err := c.historyPage(ctx, id, opts, keepRefs)
		if err != nil {
			return err
		}
		if err := fn(page.Events); err != nil {
			return err
		}
		if page.Next == 0 {
			return nil
		}
		opts.After = page.Next
		if n := len(page.Events); n < opts.Limit {
			opts.Limit = n + 1 // cut by bytes: what fitted, and one to tell
		} else {
			opts.Limit = min(2*opts.Limit, MaxHistoryPageLimit)
		}
	}
}

// HistoryPageOpts page through a task's history ([Client.HistoryPage]),
// passed by value; the zero value reads the first page with the defaults.
type HistoryPageOpts struct {
	// After is the cursor: the Next of the previous page; 0 for the first.
	After int64
	// Limit bounds the events of a page: 1 to [MaxHistoryPageLimit], 0
	// for [DefaultHistoryPageLimit].
	Limit int
	// MaxBytes bounds the event data of a page (the JSON of the payloads,
	// as stored): a page ends before the event that would go past it, but
	// holds at least one. 0: [DefaultHistoryPageBytes].
	MaxBytes int64
}

// The bounds of a [HistoryPageOpts] page: the stores' own bounds of a
// page of events.
const (
	DefaultHistoryPageLimit = 100
	MaxHistoryPageLimit     = 1000
	DefaultHistoryPageBytes = 4 << 20 // 4 MiB
)

// HistoryPage is a page of a task's history.
type HistoryPage struct {
	Events []history.Event
	// Next is the cursor of the next page (HistoryPageOpts.After); 0 when
	// this page reached the last event the task had when it was read.
	Next int64
}

// HistoryPage is [Client.History] one page at a time, keyset by seq, so a
// reader of a long history holds one page: at most opts.Limit events and
// opts.MaxBytes of their data. A task read from the archive (removed by
// retention) comes back whole, as one page: the archive keeps it as one
// record.
func (c *Client) HistoryPage(ctx context.Context, id uuid.UUID, opts HistoryPageOpts) (HistoryPage, error) {
	return c.historyPage(ctx, id, opts, false)
}

// RawHistoryPage is [Client.HistoryPage] with the references left as they
// are stored, as [Client.RawHistory].
func (c *Client) RawHistoryPage(ctx context.Context, id uuid.UUID, opts HistoryPageOpts) (HistoryPage, error) {
	return c.historyPage(ctx, id, opts, true)
}

// historyPage is HistoryPage, references read back unless keepRefs.
func (c *Client) historyPage(ctx context.Context, id uuid.UUID, opts HistoryPageOpts, keepRefs bool) (HistoryPage, error) {
	switch {
	case opts.After < 0:
		return HistoryPage{}, errmark.Mark(errors.Newf("history page: after %d: use 0 or a page's Next", opts.After), ErrInvalid)
	case opts.Limit < 0 || opts.Limit > MaxHistoryPageLimit:
		return HistoryPage{}, errmark.Mark(errors.Newf("history page: limit %d: use 1 to %d (0 for %d)", opts.Limit, MaxHistoryPageLimit, DefaultHistoryPageLimit), ErrInvalid)
	case opts.MaxBytes < 0:
		return HistoryPage{}, errmark.Mark(errors.Newf("history page: max bytes %d: use 1 or more (0 for %d)", opts.MaxBytes, DefaultHistoryPageBytes), ErrInvalid)
	}
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: id})
	if err == nil {
		var events []history.Event
		events, err = c.store.EventListPage(ctx, &store.EventPageParams{
			Namespace: c.namespace, TaskID: id, After: opts.After, Limit: opts.Limit, MaxBytes: opts.MaxBytes,
		})
		if err == nil {
			events, err = c.decodeEvents(ctx, id, events, nil, keepRefs)
		}
		if err != nil {
			return HistoryPage{}, err
		}
		if n := len(events); n > 0 || opts.After >= t.LastSeq {
			page := HistoryPage{Events: events}
			if n > 0 && events[n-1].Seq < t.LastSeq {
				page.Next = events[n-1].Seq
			}
			return page, nil
		}
		// Removed since it was read: the archive may have it.
		err = errmark.Mark(errors.Newf("task %s: no such task", id), store.ErrNotFound)
	}
	if !errors.Is(err, store.ErrNotFound) {
		return HistoryPage{}, err
	}
	archived, aerr := c.archivedHistory(ctx, id, keepRefs)
	switch {
	case aerr == nil:
		i := 0
		for i < len(archived) && archived[i].Seq <= opts.After {
			i++
		}
		return HistoryPage{Events: archived[i:]}, nil
	case errors.Is(aerr, errNoArchive), errors.Is(aerr, engine.ErrNotArchived):
		return HistoryPage{}, err
	}
	return HistoryPage{}, errors.Wrapf(aerr, "task %s is not in the database; reading the archive", id)
}

// ListOpts filter [Client.List] and [Client.ListPage]; nil, or the zero
// value, lists the newest 100.
type ListOpts struct {
	Status history.Status
	Type   string
	Queue  string
	// Filter, when set, keeps only the tasks it matches (see
	// [CompileTaskFilter]); it runs on the tasks the other fields select.
	// Filters see no payloads, so they do not make a lean listing read
	// any.
	Filter *TaskFilter
	// Before lists tasks older than this one (a cursor: the Next of the
	// previous page).
	Before uuid.UUID
	Limit  int // default 100, at most [MaxListLimit]

	// IncludeInput and IncludeOutput put the tasks' inputs and outputs in
	// the page. Without them a listing is lean: TaskInfo.Input and Output
	// are nil and the database does not read them ([Client.Get] has
	// them). With either, the page is bounded in bytes as well as rows.
	IncludeInput, IncludeOutput bool
	// MaxPayloadBytes bounds the payloads included in one page (the JSON
	// text of the inputs and outputs asked for): a page that would go past
	// it ends early, with Next set, before the first task that does not
	// fit. A page holds at least one task, and every task it holds is
	// whole. Default [DefaultMaxListPayloadBytes].
	MaxPayloadBytes int
}

// ListPage is a page of [Client.ListPage].
type ListPage struct {
	Tasks []*TaskInfo
	// Next is the cursor of the next page (ListOpts.Before); zero when no
	// more tasks were found (a full page may still be followed by an
	// empty one).
	Next uuid.UUID
	// FilterErrors counts the tasks the filter could not be evaluated on
	// (it read a label or error field they lack), which do not match;
	// FirstFilterError is the first such error. Write
	// `"tenant" in task.labels && task.labels["tenant"] == "acme"` to test
	// before reading.
	FilterErrors     int
	FirstFilterError error
}

// MaxListLimit is the most tasks one page of [Client.ListPage] holds: the
// bound of [ListOpts.Limit]. The CLI's `task list --limit` and the HTTP
// API's limit state the same bound.
const MaxListLimit = 1000

// DefaultMaxListPayloadBytes is the default of [ListOpts.MaxPayloadBytes]:
// 8 MiB of inputs and outputs per page. A single task larger than the bound
// still lists, alone on its page.
const DefaultMaxListPayloadBytes = 8 << 20

// maxFilterScan bounds the tasks one page reads to find its matches when a
// filter is set.
const maxFilterScan = 10_000

// List returns tasks of the client's namespace, newest first: the first
// page of [Client.ListPage]. opts nil takes every default.
func (c *Client) List(ctx context.Context, opts *ListOpts) ([]*TaskInfo, error) {
	page, err := c.ListPage(ctx, opts)
	if err != nil {
		return nil, err
	}
	return page.Tasks, nil
}

// ListPage returns a page of tasks of the client's namespace, newest
// first, and the cursor of the next. With a filter, a page reads at most
// 10,000 tasks (or [FilterLimits.MaxScan], if fewer) to find its matches:
// it may hold fewer than Limit while Next is set. A filter over the
// client's [FilterLimits] stops the page with [ErrFilterTooExpensive]. A
// page that includes payloads ends where ListOpts.MaxPayloadBytes says, so
// it too may hold fewer than Limit while Next is set. opts nil takes every
// default.
func (c *Client) ListPage(ctx context.Context, opts *ListOpts) (ListPage, error) {
	o := orZero(opts)
	limit := o.Limit
	switch {
	case limit < 0 || limit > MaxListLimit:
		return ListPage{}, errors.Newf("list: limit %d is outside 1..%d", limit, MaxListLimit)
	case limit == 0:
		limit = 100
	}
	for _, f := range []struct{ what, value string }{{"status", string(o.Status)}, {"type", o.Type}, {"queue", o.Queue}} {
		if !validText(f.value) {
			return ListPage{}, errmark.Mark(errors.Newf("list: %s is not valid UTF-8 text without NUL characters", f.what), ErrInvalid)
		}
	}
	l := &listing{limit: limit, payloadBudget: o.MaxPayloadBytes, payloads: o.IncludeInput || o.IncludeOutput,
		filter: o.Filter, maxScan: maxFilterScan}
	switch {
	case l.payloadBudget < 0:
		return ListPage{}, errors.Newf("list: max payload bytes %d is negative", l.payloadBudget)
	case l.payloadBudget == 0:
		l.payloadBudget = DefaultMaxListPayloadBytes
	}
	p := &store.TaskListParams{Namespace: c.namespace, Status: o.Status, Type: o.Type, Queue: o.Queue,
		Before: o.Before, Limit: limit, OmitInput: !o.IncludeInput, OmitOutput: !o.IncludeOutput}
	if l.filter != nil {
		p.Limit = max(limit, 500) // read in larger pages: most may not match
		l.budget = c.newFilterBudget()
		l.maxScan = min(maxFilterScan, l.budget.limits.MaxScan)
	}
	for {
		if l.payloads {
			// The store stops where the payloads would pass what is left,
			// so one read holds at most that and one task more.
			p.MaxPayloadBytes = l.payloadBudget
		}
		done, err := c.listBatch(ctx, l, p)
		if err == nil && (done || l.scanned >= l.maxScan) {
			err = c.setWaiting(ctx, l.page.Tasks, waitScanListed)
		}
		if err != nil || done {
			return l.page, err
		}
		if l.scanned >= l.maxScan {
			l.page.Next = p.Before
			return l.page, nil
		}
	}
}

// listing is one ListPage call's state, owned by its goroutine.
type listing struct {
	limit         int
	payloads      bool // inputs or outputs are asked for
	payloadBudget int  // payload bytes the page may still hold
	filter        *TaskFilter
	budget        *filterBudget // with a filter only
	maxScan       int
	scanned       int
	page          ListPage
}

// listBatch reads one batch of tasks after p.Before and adds what matches
// to the page; it reports whether the page is done (full, at its byte
// bound, or at the end of the tasks). p.Before moves past what it read.
func (c *Client) listBatch(ctx context.Context, l *listing, p *store.TaskListParams) (bool, error) {
	if l.budget != nil {
		var done func()
		ctx, done = l.budget.page(ctx)
		defer done()
	}
	tasks, err := c.store.TaskList(ctx, p)
	if err == nil {
		err = c.openTasks(ctx, tasks)
	}
	if err != nil {
		if l.budget != nil {
			return true, l.budget.readErr(ctx, err)
		}
		return true, err
	}
	for _, t := range tasks {
		if l.budget != nil {
			if l.scanned >= l.maxScan {
				return false, nil
			}
			if err := l.budget.scan(); err != nil {
				return true, err
			}
		}
		l.scanned++
		info := taskInfo(t)
		if l.filter != nil {
			ok, spent, err := l.filter.match(ctx, info)
			if stop := l.budget.evaluated(ctx, spent, err); stop != nil {
				return true, stop
			}
			if err != nil {
				// A task the filter cannot be evaluated on (a label it
				// lacks) does not match; the page counts it.
				l.page.FilterErrors++
				if l.page.FirstFilterError == nil {
					l.page.FirstFilterError = err
				}
			}
			if err != nil || !ok {
				p.Before = t.ID
				continue
			}
		}
		size := len(t.Input) + len(t.Output)
		if l.payloads && size > l.payloadBudget && len(l.page.Tasks) > 0 {
			// It would take the page past its bound: the next page
			// starts with it.
			l.page.Next = p.Before
			return true, nil
		}
		p.Before = t.ID
		l.page.Tasks = append(l.page.Tasks, info)
		l.payloadBudget -= size
		if len(l.page.Tasks) == l.limit || (l.payloads && l.payloadBudget <= 0) {
			l.page.Next = t.ID
			return true, nil
		}
	}
	// A short read is the end of the tasks, unless the store cut it at the
	// byte bound: then only an empty one is.
	return len(tasks) == 0 || (!l.payloads && len(tasks) < p.Limit), nil
}

// Output decodes a completed task's output into Out. A task that ended
// otherwise is a [*TaskError] (see [Run.Result]); one not finished yet is
// [ErrTaskState].
func Output[Out any](info *TaskInfo) (Out, error) {
	var out Out
	switch {
	case info.Status.Terminal() && info.Status != history.StatusCompleted:
		return out, newTaskError(info)
	case info.Status != history.StatusCompleted:
		return out, errmark.Mark(errors.Newf("task %s is %s, not finished", info.ID, info.Status), ErrTaskState)
	}
	if len(info.Output) == 0 {
		return out, nil
	}
	err := json.Unmarshal(info.Output, &out)
	return out, errors.Wrapf(err, "decode output of task %s", info.ID)
}

// StartParams is one task of a [Client.StartMany]. [StartEntry] builds
// one whose input's type is checked when it compiles; a literal is the
// untyped form, as [Client.StartDynamic] is.
type StartParams struct {
	Workflow WorkflowRef
	Input    any
	Opts     StartOpts
}

// StartMany starts many tasks in one round trip (a batched insert) and
// returns their results in the order given. Either all are persisted or, on
// error, none. Idempotency keys work as in [Start], also between
// tasks of the same batch: one start reusing a key with another type or
// input fails the whole batch with [ErrIdempotencyKeyReused].
func (c *Client) StartMany(ctx context.Context, starts []StartParams) ([]StartResult, error) {
	params := make([]*store.TaskStartParams, len(starts))
	for i, s := range starts {
		p, err := c.startParams(s.Workflow, s.Input, &s.Opts)
		if err != nil {
			return nil, errors.Wrapf(err, "start %d of %d", i+1, len(starts))
		}
		params[i] = p
	}
	res, err := c.store.Start(ctx, params)
	if err != nil {
		return nil, err
	}
	out := make([]StartResult, len(res))
	for i, r := range res {
		out[i] = StartResult(r)
	}
	return out, nil
}

// blobThreshold fills the default of a BlobThreshold setting: 0 takes
// DefaultBlobThreshold, negative turns it off (0).
func blobThreshold(n int) int {
	switch {
	case n == 0:
		return DefaultBlobThreshold
	case n < 0:
		return 0
	}
	return n
}

// checkReserved refuses a payload shaped like the objects cairn writes in
// a payload's place, {"cairn_blob": …} and {"cairn_sealed": …}: readers
// would take it for one. The object's member names are decoded as a store
// reads them back (PostgreSQL's jsonb unescapes names and orders members
// by length), so a reserved name anywhere among them, escaped or not, is
// refused: {"canonical_sha256": "x", "cairn_blob": …} is stored as
// {"cairn_blob": …, "canonical_sha256": "x"}, which is a reference.
func checkReserved(what string, raw json.RawMessage) error {
	switch reservedMember(raw) {
	case history.BlobMember:
		return errors.Newf("%s is an object with a member named %q, which cairn reserves for payloads kept by reference", what, history.BlobMember)
	case history.SealedMember:
		return errors.Newf("%s is an object with a member named %q, which cairn reserves for encrypted payloads", what, history.SealedMember)
	}
	return nil
}

// reservedMember returns the first reserved name among the members of the
// object raw is (as decoded: escapes resolved), or "" when it names none
// or is no object. raw is JSON already checked.
func reservedMember(raw json.RawMessage) string {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ""
	}
	// Written without an escape, a reserved name is in the text as it is:
	// text holding neither name nor a backslash names neither, and is not
	// decoded (a decoder per start was a tenth of StartMany's CPU).
	if bytes.IndexByte(trimmed, '\\') < 0 && !bytes.Contains(trimmed, []byte(history.BlobMember)) &&
		!bytes.Contains(trimmed, []byte(history.SealedMember)) {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // {
		return ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if name, _ := tok.(string); name == history.BlobMember || name == history.SealedMember {
			return name
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}
