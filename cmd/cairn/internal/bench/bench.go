// Package bench is the benchmark suite behind `cairn bench`. It measures
// cairn on a real PostgreSQL with the method of the peer benchmarks
// (River's `river bench`, our dbosbench): pre-insert a backlog, then time
// how fast workers drain it, with every event written. Throughput and
// workflow also run on the embedded store.
//
// cmd/cairn parses the flags and calls one entry point per mode
// ([Throughput], [Workflow], [Latency], [Replay], [Scale], [Audit],
// [Steady], [Waiting], and [Worker] in the processes [Scale] spawns) with a [Config] and the mode's
// parameters. Reports are printed as tables, or as one JSON object that
// scripts/compare-peers.sh reads. The statements the bench runs itself (to
// reset its schema and to observe it) are in bench.sql and audit.sql
// (PostgreSQL) and sqlite.sql (the embedded store); the engine's own
// statements stay in the engine.
//
// It imports sdk, engine, engine/sqlitestore, history, activities and
// workflow of cairn, and only cmd/cairn imports it.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// ErrConfig marks errors the user fixes by changing a flag or the
// configuration (a value out of range, a mode that needs PostgreSQL, a
// schema the bench must not drop); cmd/cairn exits with its configuration
// exit code on them.
var ErrConfig = errors.New("bench configuration error")

// DefaultSchema is where the bench works unless --schema is given on the
// command line; CAIRN_SCHEMA is ignored on purpose, as the bench drops its
// schema.
const DefaultSchema = "cairn_bench"

// DefaultDrainPoll is how often a drain asks the database whether every
// task has finished (--poll-interval); drain times are known to this
// granularity.
const DefaultDrainPoll = 10 * time.Millisecond

// benchWorkerPollInterval is the workers' claim poll, as in River's bench
// (FetchPollInterval 20ms); notifications usually wake them first.
const benchWorkerPollInterval = 20 * time.Millisecond

// The workflow every bench worker runs: input.Steps no-op steps.
const (
	benchNoopType   = "bench.noop"
	benchReplayType = "bench.replay"
)

// Config is what every mode needs besides its parameters.
type Config struct {
	// DatabaseURL is the PostgreSQL the bench runs on. Empty: Throughput,
	// Workflow, Latency and Replay run on a fresh embedded store, the other
	// modes fail with [ErrConfig]. Scale hands it to its worker processes (by
	// environment, so no password shows in the process list).
	DatabaseURL string
	// Schema is the schema the bench drops and migrates afresh before each
	// run; cmd/cairn passes [DefaultSchema] unless --schema was given.
	// Unused on the embedded store.
	Schema string
	// Namespace is the namespace of the bench's tasks.
	Namespace string
	// JSON prints the report as one JSON object on Stdout and no progress
	// lines; otherwise the report is a table and progress goes to Stderr.
	JSON bool
	// ListenURL is the workers' and clients' listener's own connection
	// string (--listen-database-url; "": the pool's).
	ListenURL string
	// ConnectFunc opens a pool of maxConns connections to DatabaseURL,
	// checking Schema's name first. Its errors are one line saying what to
	// set. Required unless the run is on the embedded store.
	ConnectFunc func(ctx context.Context, maxConns int32) (*pgxpool.Pool, error)
	// Stdout receives the report (default os.Stdout); Stderr progress
	// lines and the messages of worker processes (default os.Stderr);
	// Worker reads its orders from Stdin (default os.Stdin).
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	// Keys, when set, encrypt the payloads of the namespaces they have
	// keys for (the bench's own when they list it): its clients and
	// workers seal and open, to measure what encryption at rest costs.
	Keys *seal.Keys
}

// withDefaults fills the zero values Config documents.
func (c Config) withDefaults() Config {
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Stdin == nil {
		c.Stdin = os.Stdin
	}
	return c
}

// connect opens a pool of maxConns connections to the bench's PostgreSQL.
func (c *Config) connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if c.ConnectFunc == nil {
		return nil, errors.AssertionFailedf("bench: Config.ConnectFunc is required on PostgreSQL")
	}
	return c.ConnectFunc(ctx, maxConns)
}

// embedded reports whether the run is on the embedded store.
func (c *Config) embedded() bool { return c.DatabaseURL == "" }

type benchInput struct {
	Steps int `json:"steps"`
	// Pad makes the input --input-bytes long: a task's input is written
	// with its row and its task_scheduled, and every version of the row
	// carries it.
	Pad string `json:"pad,omitempty"`
}

// newBenchWorkflow returns the no-op workflow. onStep, when not nil, is
// called at the start of every step with the step's activity context.
func newBenchWorkflow(onStep func(context.Context)) *sdk.Workflow[benchInput, int] {
	return sdk.NewWorkflow(benchNoopType, 1, func(ctx workflow.Context, in benchInput) (int, error) {
		for i := range in.Steps {
			_, err := workflow.Step(ctx, "s"+strconv.Itoa(i+1), func(sctx context.Context) (struct{}, error) {
				if onStep != nil {
					onStep(sctx)
				}
				return struct{}{}, nil
			}, nil)
			if err != nil {
				return 0, err
			}
		}
		return in.Steps, nil
	}, nil)
}

// Params are the parameters of Throughput, Workflow, Latency, Replay,
// Scale and Worker, one field per flag of `cairn bench`; each mode reads
// the ones it has flags for and leaves the others zero. The modes check
// them and answer a value out of range with [ErrConfig].
type Params struct {
	Tasks       int           // --tasks: tasks (or workflows) inserted before the workers start
	Workers     int           // --workers: in-process workers sharing one pool
	Concurrency int           // --concurrency: tasks one worker runs at once
	Steps       int           // --steps: no-op steps per task (Workflow, Scale)
	Batch       int           // --batch: tasks per Client.StartMany call
	MaxConns    int           // --max-conns: connections in a worker process's pool
	Rate        int           // --rate: tasks started per second (Latency)
	Duration    time.Duration // --duration: how long each Latency sub-run produces
	Processes   []int         // --processes: worker process counts, one drain each (Scale)
	Sizes       []int         // --sizes: history lengths in events (Replay)
	Timeout     time.Duration // --timeout: give up on a drain after this long
	DrainPoll   time.Duration // --poll-interval: how often a drain polls ([DefaultDrainPoll])
	MemProfile  string        // --memprofile: a Go allocation profile of the run goes here
	CPUProfile  string        // --cpuprofile: a Go CPU profile of the drain goes here
	InsertCPU   string        // --insert-cpuprofile: a Go CPU profile of the insert goes here
	Finished    int           // --finished: finished ballast tasks put in first (PostgreSQL)
	Retention   time.Duration // --retention: the workers' default retention (0: none)
	InputBytes  int           // --input-bytes: each task's input is padded to about this many bytes
	Metrics     bool          // --metrics: workers count Prometheus metrics
	Waiting     []int         // --waiting: sizes of the waiting set, one window each (Waiting)
	Window      time.Duration // --window: how long Waiting reads the database's statistics
	HoldXmin    time.Duration // --hold-xmin: Steady holds a snapshot open this long, in the run's middle
	Vacuum      bool          // --vacuum: Scale vacuums the tables between a drain and its start-latency run
}

func (f *Params) validate() error {
	bad := func(format string, args ...any) error {
		return errmark.Mark(errors.Newf(format, args...), ErrConfig)
	}
	switch {
	case f.Tasks < 0 || f.Tasks > 10_000_000:
		return bad("--tasks %d: use 1 to 10000000", f.Tasks)
	case f.InputBytes < 0 || f.InputBytes > 1<<20:
		return bad("--input-bytes %d: use 0 to 1048576", f.InputBytes)
	case f.Workers < 0 || f.Workers > 64:
		return bad("--workers %d: use 1 to 64", f.Workers)
	case f.Concurrency < 0 || f.Concurrency > 100_000:
		return bad("--concurrency %d: use 1 to 100000", f.Concurrency)
	case f.Steps < 0 || f.Steps > 10_000:
		return bad("--steps %d: use 1 to 10000", f.Steps)
	case f.Batch < 0 || f.Batch > 100_000:
		return bad("--batch %d: use 1 to 100000", f.Batch)
	case f.MaxConns < 0 || f.MaxConns > 1000:
		return bad("--max-conns %d: use 1 to 1000", f.MaxConns)
	case f.Rate < 0 || f.Rate > 100_000:
		return bad("--rate %d: use 1 to 100000 tasks per second", f.Rate)
	case f.Duration < 0 || f.Duration > time.Hour:
		return bad("--duration %s: use 1s to 1h", f.Duration)
	case f.Timeout < 0:
		return bad("--timeout must not be negative")
	case f.Retention < 0:
		return bad("--retention %s: use 0 (none) or more", f.Retention)
	case f.DrainPoll < 0 || f.DrainPoll > 10*time.Second:
		return bad("--poll-interval %s: use 1ms to 10s", f.DrainPoll)
	}
	for _, p := range f.Processes {
		if p < 1 || p > 64 {
			return bad("--processes %d: use 1 to 64 processes per run", p)
		}
	}
	for _, s := range f.Sizes {
		if s < 4 || s > 1_000_000 {
			return bad("--sizes %d: use 4 to 1000000 events (a history has at least scheduled, started, one step, completed)", s)
		}
	}
	return nil
}

// validateDrain checks the parameters only the drain modes have.
func (f *Params) validateDrain() error {
	switch {
	case f.DrainPoll < time.Millisecond:
		return errmark.Mark(errors.Newf("--poll-interval %s: use 1ms to 10s", f.DrainPoll), ErrConfig)
	case f.Timeout <= 0:
		return errmark.Mark(errors.Newf("--timeout %s: must be positive", f.Timeout), ErrConfig)
	}
	return positive(intFlag{"tasks", f.Tasks}, intFlag{"batch", f.Batch})
}

// intFlag is a flag's name and value, for positive.
type intFlag struct {
	name  string
	value int
}

// positive rejects a zero left in a flag the mode requires, checking flags
// in order.
func positive(flags ...intFlag) error {
	for _, f := range flags {
		if f.value < 1 {
			return errmark.Mark(errors.Newf("--%s %d: must be at least 1", f.name, f.value), ErrConfig)
		}
	}
	return nil
}

// benchEnv is one run's connection, schema and the context its figures
// are reported with.
type benchEnv struct {
	cfg Config
	obs *benchSQL
	// lite is the embedded store the run works on, when no database URL is
	// set (throughput and workflow modes only); obs is nil then.
	lite *sqlitestore.Store
	// liteQueries are the statements of sqlite.sql, with lite.
	liteQueries map[string]string
	header      benchHeader
	// progress receives progress lines; io.Discard with JSON.
	progress io.Writer
}

// benchHeader is the part of every JSON report that describes the run's
// circumstances.
type benchHeader struct {
	Mode            string `json:"mode"`
	GoVersion       string `json:"go_version"`
	GOMAXPROCS      int    `json:"gomaxprocs"`
	NumCPU          int    `json:"num_cpu"`
	PostgresVersion string `json:"postgres_version,omitempty"`
	// SQLiteVersion and SQLiteFile are set on the embedded store.
	SQLiteVersion string    `json:"sqlite_version,omitempty"`
	SQLiteFile    string    `json:"sqlite_file,omitempty"`
	Schema        string    `json:"schema"`
	Namespace     string    `json:"namespace"`
	StartedAt     time.Time `json:"started_at"`
}

// openBench connects the bench's observation pool and reads the server
// version. It does not reset the schema: each run does that itself.
func openBench(ctx context.Context, cfg Config, mode string) (*benchEnv, func(), error) {
	cfg = cfg.withDefaults()
	if cfg.embedded() {
		return openEmbeddedBench(ctx, cfg, mode)
	}
	pool, err := cfg.connect(ctx, 4)
	if err != nil {
		return nil, nil, err
	}
	obs, err := newBenchSQL(pool, cfg.Schema)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	version, err := obs.serverVersion(ctx)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	env := &benchEnv{cfg: cfg, obs: obs, progress: cfg.Stderr, header: benchHeader{
		Mode: mode, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		PostgresVersion: version, Schema: cfg.Schema, Namespace: cfg.Namespace, StartedAt: time.Now().UTC(),
	}}
	if cfg.JSON {
		env.progress = io.Discard
	}
	return env, pool.Close, nil
}

// reset drops and re-migrates the bench schema. The embedded store's file
// is new with each run already.
func (e *benchEnv) reset(ctx context.Context) error {
	if e.lite != nil {
		return nil
	}
	return e.obs.reset(ctx, func(ctx context.Context) error {
		_, err := pgstore.Migrate(ctx, e.obs.pool, e.cfg.Schema)
		return err
	})
}

func (e *benchEnv) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}

// workerPool opens a pool for workers or clients with maxConns connections.
func (e *benchEnv) workerPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	return e.cfg.connect(ctx, int32(maxConns))
}

// newBenchWorker returns a worker with the settings that make sense for
// throughput: short claim poll, default rescuer, warnings only.
func newBenchWorker(pool *pgxpool.Pool, cfg *Config, concurrency int, onStep func(context.Context)) (*sdk.Worker, error) {
	return newBenchWorkerWithMetrics(benchTarget{pool: pool}, cfg, concurrency, onStep, nil, 0)
}

// benchTarget is the database bench workers and clients use: a pool on
// PostgreSQL, or the embedded store.
type benchTarget struct {
	pool *pgxpool.Pool
	lite *sqlitestore.Store
}

func (t benchTarget) store() store.Store {
	if t.lite != nil {
		return t.lite
	}
	return nil
}

// newBenchWorkerWithMetrics is newBenchWorker counting into metrics (nil:
// none), to measure what metrics cost, and whose rescuer removes finished
// tasks older than retention (0: none), to measure what retention costs.
func newBenchWorkerWithMetrics(t benchTarget, cfg *Config, concurrency int, onStep func(context.Context), metrics *sdk.Metrics, retention time.Duration) (*sdk.Worker, error) {
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Pool: t.pool, Store: t.store(), Schema: cfg.Schema, ListenURL: cfg.ListenURL, Namespace: cfg.Namespace, Concurrency: concurrency,
		PollInterval: benchWorkerPollInterval,
		Logger:       benchLogger(),
		Metrics:      metrics, DefaultRetention: retention, Keys: cfg.Keys,
	})
	if err != nil {
		return nil, err
	}
	return w, sdk.RegisterSafely(w, newBenchWorkflow(onStep))
}

// benchLogger is the bench workers' logger: warnings and errors only.
func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// stopWorkers stops workers gracefully, giving them a bounded time.
func stopWorkers(workers []*sdk.Worker) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs error
	for _, w := range workers {
		errs = errors.CombineErrors(errs, w.Stop(ctx))
	}
	return errs
}

// ms converts a duration to milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// perSecond is n per d, or 0 for an empty d.
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// printJSON writes a report as indented JSON, as the CLI's -o json does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a writer for a text report, laid out as the CLI's
// tables are.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// printBenchEnv writes the run's circumstances under a text report.
func printBenchEnv(w io.Writer, h benchHeader) {
	if h.SQLiteVersion != "" {
		fmt.Fprintf(w, "env:\t%s, GOMAXPROCS %d (%d CPUs), embedded store: SQLite %s, file %s\n",
			h.GoVersion, h.GOMAXPROCS, h.NumCPU, h.SQLiteVersion, h.SQLiteFile)
		return
	}
	fmt.Fprintf(w, "env:\t%s, GOMAXPROCS %d (%d CPUs), PostgreSQL %s, schema %s\n",
		h.GoVersion, h.GOMAXPROCS, h.NumCPU, h.PostgresVersion, h.Schema)
}
