package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/engine/pgstore"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// `cairn bench` measures cairn on a real PostgreSQL with the method of the
// peer benchmarks (River's `river bench`, our dbosbench): pre-insert a
// backlog, then time how fast workers drain it, with every event written.

// defaultBenchSchema is where the bench works unless --schema is given on
// the command line; CAIRN_SCHEMA is ignored on purpose, as the bench drops
// its schema.
const defaultBenchSchema = "cairn_bench"

// defaultDrainPoll is how often a drain asks the database whether every
// task has finished; drain times are known to this granularity.
const defaultDrainPoll = 10 * time.Millisecond

// benchWorkerPollInterval is the workers' claim poll, as in River's bench
// (FetchPollInterval 20ms); notifications usually wake them first.
const benchWorkerPollInterval = 20 * time.Millisecond

// The workflow every bench worker runs: input.Steps no-op steps.
const (
	benchNoopType   = "bench.noop"
	benchReplayType = "bench.replay"
)

type benchInput struct {
	Steps int `json:"steps"`
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

// benchFlags are the flags of the bench modes; each mode registers the ones
// it uses.
type benchFlags struct {
	tasks       int
	workers     int
	concurrency int
	steps       int
	batch       int
	maxConns    int
	rate        int
	duration    time.Duration
	processes   []int
	sizes       []int
	timeout     time.Duration
	drainPoll   time.Duration
	memProfile  string
	cpuProfile  string
	finished    int
	metrics     bool // --metrics: workers count Prometheus metrics
}

func (f *benchFlags) addTasks(cmd *cobra.Command, def int) {
	cmd.Flags().IntVarP(&f.tasks, "tasks", "n", def, "tasks (or workflows) to insert before the workers start")
}

func (f *benchFlags) addWorkerFlags(cmd *cobra.Command, workers bool) {
	if workers {
		cmd.Flags().IntVar(&f.workers, "workers", 1, "in-process workers (each with --concurrency slots) sharing one pool")
	}
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 2000, "tasks one worker runs at once (River's bench uses MaxWorkers 2000)")
	cmd.Flags().IntVar(&f.maxConns, "max-conns", 16, "connections in a worker process's pool")
}

func (f *benchFlags) addDrainFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.batch, "batch", 5000, "tasks per Client.StartMany call when inserting")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up on a drain after this long")
	cmd.Flags().DurationVar(&f.drainPoll, "poll-interval", defaultDrainPoll, "how often the drain asks the database whether all tasks are done")
	cmd.Flags().IntVar(&f.finished, "finished", 0, "finished tasks (4 events each) put in the tables before the run, to measure the drain with history piled up")
}

func (f *benchFlags) addProfileFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the drain (workers and bench) to this file")
	cmd.Flags().StringVar(&f.memProfile, "memprofile", "", "write a Go allocation profile of the run (insert and drain) to this file")
}

func (f *benchFlags) validate() error {
	bad := func(format string, args ...any) error {
		return errors.Mark(errors.Newf(format, args...), configError)
	}
	switch {
	case f.tasks < 0 || f.tasks > 10_000_000:
		return bad("--tasks %d: use 1 to 10000000", f.tasks)
	case f.workers < 0 || f.workers > 64:
		return bad("--workers %d: use 1 to 64", f.workers)
	case f.concurrency < 0 || f.concurrency > 100_000:
		return bad("--concurrency %d: use 1 to 100000", f.concurrency)
	case f.steps < 0 || f.steps > 10_000:
		return bad("--steps %d: use 1 to 10000", f.steps)
	case f.batch < 0 || f.batch > 100_000:
		return bad("--batch %d: use 1 to 100000", f.batch)
	case f.maxConns < 0 || f.maxConns > 1000:
		return bad("--max-conns %d: use 1 to 1000", f.maxConns)
	case f.rate < 0 || f.rate > 100_000:
		return bad("--rate %d: use 1 to 100000 tasks per second", f.rate)
	case f.duration < 0 || f.duration > time.Hour:
		return bad("--duration %s: use 1s to 1h", f.duration)
	case f.timeout < 0:
		return bad("--timeout must not be negative")
	case f.drainPoll < 0 || f.drainPoll > 10*time.Second:
		return bad("--poll-interval %s: use 1ms to 10s", f.drainPoll)
	}
	for _, p := range f.processes {
		if p < 1 || p > 64 {
			return bad("--processes %d: use 1 to 64 processes per run", p)
		}
	}
	for _, s := range f.sizes {
		if s < 4 || s > 1_000_000 {
			return bad("--sizes %d: use 4 to 1000000 events (a history has at least scheduled, started, one step, completed)", s)
		}
	}
	return nil
}

// validateDrain checks the flags of addDrainFlags, which only the drain
// modes register.
func (f *benchFlags) validateDrain() error {
	switch {
	case f.drainPoll < time.Millisecond:
		return errors.Mark(errors.Newf("--poll-interval %s: use 1ms to 10s", f.drainPoll), configError)
	case f.timeout <= 0:
		return errors.Mark(errors.Newf("--timeout %s: must be positive", f.timeout), configError)
	}
	return positive(intFlag{"tasks", f.tasks}, intFlag{"batch", f.batch})
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
			return errors.Mark(errors.Newf("--%s %d: must be at least 1", f.name, f.value), configError)
		}
	}
	return nil
}

const benchLong = `Benchmarks cairn against the PostgreSQL of --database-url (env
CAIRN_DATABASE_URL), with the method of the peer benchmarks: tasks are
inserted first (Client.StartMany), then workers drain them, writing every
event of every task.

The bench works in its own schema, cairn_bench unless --schema is given on
the command line (CAIRN_SCHEMA is ignored). That schema is DROPPED and
migrated afresh before each run, so runs are comparable; the bench refuses
a schema holding tables or tasks it did not create.

Results print as a table, or with -o json as one JSON object with every
figure, the Go version, GOMAXPROCS and the PostgreSQL version.`

func newBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, latency, replay cost and scaling (drops and recreates its own schema)",
		Long:  benchLong,
	}
	cmd.AddCommand(newBenchThroughputCmd(g), newBenchWorkflowCmd(g), newBenchLatencyCmd(g),
		newBenchReplayCmd(g), newBenchScaleCmd(g), newBenchWorkerCmd(g))
	return cmd
}

// benchEnv is one run's connection, schema and the context its figures
// are reported with.
type benchEnv struct {
	g   *globals // with schema set to the bench schema
	obs *benchSQL
	// lite is the embedded store the run works on, when no database URL is
	// set (throughput and workflow modes only); obs is nil then.
	lite   *sqlitestore.Store
	header benchHeader
	// progress receives progress lines; io.Discard with -o json.
	progress io.Writer
	// prefilled is the number of finished ballast tasks put in before
	// the run (--finished).
	prefilled int
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
func openBench(cmd *cobra.Command, g *globals, mode string) (*benchEnv, func(), error) {
	if g.embedded() {
		return openEmbeddedBench(cmd, g, mode)
	}
	bg := *g
	if !cmd.Flags().Changed("schema") {
		bg.schema = defaultBenchSchema
	}
	pool, err := bg.connect(cmd.Context(), 4)
	if err != nil {
		return nil, nil, err
	}
	obs := newBenchSQL(pool, bg.schema)
	version, err := obs.serverVersion(cmd.Context())
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	env := &benchEnv{g: &bg, obs: obs, progress: cmd.ErrOrStderr(), header: benchHeader{
		Mode: mode, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		PostgresVersion: version, Schema: bg.schema, Namespace: bg.namespace, StartedAt: time.Now().UTC(),
	}}
	if g.output == "json" {
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
		_, err := pgstore.Migrate(ctx, e.obs.pool, e.g.schema)
		return err
	})
}

func (e *benchEnv) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}

// workerPool opens a pool for workers or clients with maxConns connections.
func (e *benchEnv) workerPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	return e.g.connect(ctx, int32(maxConns))
}

// newBenchWorker returns a worker with the settings that make sense for
// throughput: short claim poll, default rescuer, warnings only.
func newBenchWorker(pool *pgxpool.Pool, g *globals, concurrency int, onStep func(context.Context)) (*sdk.Worker, error) {
	return newBenchWorkerWithMetrics(benchTarget{pool: pool}, g, concurrency, onStep, nil)
}

// benchTarget is the database bench workers and clients use: a pool on
// PostgreSQL, or the embedded store.
type benchTarget struct {
	pool *pgxpool.Pool
	lite *sqlitestore.Store
}

func (t benchTarget) store() engine.Store {
	if t.lite != nil {
		return t.lite
	}
	return nil
}

// newBenchWorkerWithMetrics is newBenchWorker counting into metrics (nil:
// none), to measure what metrics cost.
func newBenchWorkerWithMetrics(t benchTarget, g *globals, concurrency int, onStep func(context.Context), metrics *engine.Metrics) (*sdk.Worker, error) {
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Pool: t.pool, Store: t.store(), Schema: g.schema, Namespace: g.namespace, Concurrency: concurrency,
		PollInterval: benchWorkerPollInterval,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics:      metrics,
	})
	if err != nil {
		return nil, err
	}
	return w, sdk.RegisterSafely(w, newBenchWorkflow(onStep))
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
