package main

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/cmd/cairn/internal/bench"
	"github.com/cairnflow/cairn/internal/errmark"
)

// `cairn bench`: the flags and help of the benchmark suite, which lives in
// cmd/cairn/internal/bench.

const benchLong = `Benchmarks cairn against the PostgreSQL of --database-url (env
CAIRN_DATABASE_URL), with the method of the peer benchmarks: tasks are
inserted first (Client.StartMany), then workers drain them, writing every
event of every task. Without a database URL, throughput, workflow, latency,
replay and children run on the embedded store, in a fresh file removed
after.

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
	cmd.AddCommand(newBenchThroughputCmd(g), newBenchWorkflowCmd(g), newBenchLatencyCmd(g), newBenchSteadyCmd(g),
		newBenchReplayCmd(g), newBenchScaleCmd(g), newBenchAuditCmd(g), newBenchWaitingCmd(g), newBenchChildrenCmd(g), newBenchWorkerCmd(g))
	return cmd
}

// benchConfig is what every bench mode gets from the global flags. The
// bench works in bench.DefaultSchema unless --schema is given on the
// command line: CAIRN_SCHEMA names the schema of real work, and the bench
// drops its own.
func benchConfig(cmd *cobra.Command, g *globals) bench.Config {
	bg := *g
	if !cmd.Flags().Changed("schema") {
		bg.schema = bench.DefaultSchema
	}
	return bench.Config{
		DatabaseURL: bg.url(), ListenURL: bg.listenDatabaseURL(), Schema: bg.schema, Namespace: bg.namespace, JSON: g.output == "json",
		ConnectFunc: bg.connect,
		Stdout:      cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Stdin: cmd.InOrStdin(),
	}
}

// benchRunE is the RunE of a bench mode: run calls the mode's entry point,
// whose configuration errors exit as the CLI's do.
func benchRunE(g *globals, run func(*cobra.Command, bench.Config) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		cfg := benchConfig(cmd, g)
		keys, err := g.readKeys()
		if err != nil {
			return err
		}
		cfg.Keys = keys // --keys: the bench's payloads encrypted at rest, to measure what it costs
		err = run(cmd, cfg)
		if errors.Is(err, bench.ErrConfig) {
			return errmark.Mark(err, configError)
		}
		return err
	}
}

func addBenchTasksFlag(cmd *cobra.Command, p *bench.Params, def int) {
	cmd.Flags().IntVarP(&p.Tasks, "tasks", "n", def, "tasks (or workflows) to insert before the workers start")
}

func addBenchWorkerFlags(cmd *cobra.Command, p *bench.Params, workers bool) {
	if workers {
		cmd.Flags().IntVar(&p.Workers, "workers", 1, "in-process workers (each with --concurrency slots) sharing one pool")
	}
	cmd.Flags().IntVar(&p.Concurrency, "concurrency", 2000, "tasks one worker runs at once (River's bench uses MaxWorkers 2000)")
	cmd.Flags().IntVar(&p.MaxConns, "max-conns", 16, "connections in a worker process's pool")
}

func addBenchDrainFlags(cmd *cobra.Command, p *bench.Params) {
	cmd.Flags().IntVar(&p.Batch, "batch", 5000, "tasks per Client.StartMany call when inserting")
	cmd.Flags().DurationVar(&p.Timeout, "timeout", 10*time.Minute, "give up on a drain after this long")
	cmd.Flags().DurationVar(&p.DrainPoll, "poll-interval", bench.DefaultDrainPoll, "how often the drain asks the database whether all tasks are done")
	cmd.Flags().IntVar(&p.Finished, "finished", 0, "finished tasks (4 events each) put in the tables before the run, to measure the drain with history piled up")
	cmd.Flags().DurationVar(&p.Retention, "retention", 0, "the workers' default retention: their rescuer removes finished tasks older than this during the drain (the --finished ones finished a day ago), to measure what retention costs a drain (0: none)")
	cmd.Flags().IntVar(&p.InputBytes, "input-bytes", 0, "pad each task's input to about this many bytes of JSON (0: the bare input, 11 bytes)")
}

func addBenchProfileFlags(cmd *cobra.Command, p *bench.Params) {
	cmd.Flags().StringVar(&p.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the drain (workers and bench) to this file")
	cmd.Flags().StringVar(&p.InsertCPU, "insert-cpuprofile", "", "write a Go CPU profile of the insert (Client.StartMany) to this file")
	cmd.Flags().StringVar(&p.MemProfile, "memprofile", "", "write a Go allocation profile of the run (insert and drain) to this file")
}

func addBenchMetricsFlag(cmd *cobra.Command, p *bench.Params) {
	cmd.Flags().BoolVar(&p.Metrics, "metrics", false, "workers count Prometheus metrics (sdk.NewMetrics, a registry of the run's own), to measure their cost")
}

func newBenchThroughputCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Insert --tasks single-step no-op tasks, then drain them: insert rate and drain rate",
		Long: benchLong + `

throughput inserts --tasks tasks of one no-op step (Client.StartMany in
batches of --batch), then starts --workers in-process workers and measures
the drain: from the workers' start until a poll of the database (every
--poll-interval) finds every task completed, with its full history written.
Workers claim with a 20ms poll interval (as River's bench) besides
LISTEN/NOTIFY, keep the default rescuer, and log warnings only.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Throughput(cmd.Context(), cfg, *p)
		}),
	}
	addBenchTasksFlag(cmd, p, 100_000)
	addBenchWorkerFlags(cmd, p, true)
	addBenchDrainFlags(cmd, p)
	addBenchProfileFlags(cmd, p)
	addBenchMetricsFlag(cmd, p)
	return cmd
}

func newBenchWorkflowCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Insert --tasks workflows of --steps no-op steps, then drain them: workflows/s and steps/s",
		Long: benchLong + `

workflow is throughput with --steps no-op steps per workflow, each recorded
(step_completed) before the next runs.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Workflow(cmd.Context(), cfg, *p)
		}),
	}
	addBenchTasksFlag(cmd, p, 20_000)
	cmd.Flags().IntVar(&p.Steps, "steps", 3, "no-op steps per workflow")
	addBenchWorkerFlags(cmd, p, true)
	addBenchDrainFlags(cmd, p)
	addBenchProfileFlags(cmd, p)
	addBenchMetricsFlag(cmd, p)
	return cmd
}

func newBenchLatencyCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Open-loop producer at --rate tasks/s for --duration against idle workers: p50/p90/p99/max",
		Long: benchLong + `

latency starts --workers in-process workers, then runs two sub-runs, 1-step
tasks and 3-step workflows: a producer calls Client.StartDynamic --rate times a
second for --duration, on schedule whatever earlier tasks do (open loop),
and each task is timed from its Start call to Start's return
(schedule→accepted: the task durable), to its first step's start
(schedule→start, in-process) and to the return of Client.Wait
(schedule→completed). schedule→recorded is created_at → finished_at from
the task row: completion as recorded, without the time Wait takes to learn
of it.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Latency(cmd.Context(), cfg, *p)
		}),
	}
	cmd.Flags().IntVar(&p.Rate, "rate", 100, "tasks started per second")
	cmd.Flags().DurationVar(&p.Duration, "duration", 10*time.Second, "how long each sub-run produces")
	addBenchWorkerFlags(cmd, p, true)
	return cmd
}

func newBenchSteadyCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	var vacuum bool
	cmd := &cobra.Command{
		Use:   "steady",
		Short: "Steady state with retention: keyed tasks at --rate for --duration, removed --retention after they finish; table sizes sampled",
		Long: benchLong + `

steady starts --workers in-process workers whose leader removes finished
tasks --retention after they finish (their idempotency keys stay retired
for 1s), and a producer that starts keyed one-step tasks at --rate for
--duration. Twenty-four times in the run, beside the producer, it reads
the live and dead rows (the statistics' counts) and the total size
(indexes and TOAST included) of tasks, events, retired_keys and blobs,
after a VACUUM of each unless
--vacuum=false (a stand-in for autovacuum, which reuses removed rows' space
the same way), and how many tasks are unfinished, which gives the rate at
which they finish. With retention keeping up the sizes plateau: the report
ends with the largest total size over the smallest in the run's second
half. --hold-xmin D holds a REPEATABLE READ transaction's snapshot open for
D in the middle of the run, as a long report or a forgotten session would:
nothing that dies meanwhile can be vacuumed, and the report gives the
finish rate before, during and after the hold. PostgreSQL only.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Steady(cmd.Context(), cfg, *p, vacuum)
		}),
	}
	cmd.Flags().IntVar(&p.Rate, "rate", 500, "tasks started per second")
	cmd.Flags().DurationVar(&p.Duration, "duration", 2*time.Minute, "how long the producer runs")
	cmd.Flags().DurationVar(&p.Retention, "retention", 3*time.Second, "the workers' default retention (0: none, and the tables grow)")
	cmd.Flags().BoolVar(&vacuum, "vacuum", true, "VACUUM the tables at each sample, as autovacuum would")
	cmd.Flags().DurationVar(&p.HoldXmin, "hold-xmin", 0, "hold a transaction's snapshot open this long in the middle of the run (the oldest xmin: no vacuum removes what dies meanwhile), and report the finish rate before, during and after (0: none)")
	addBenchWorkerFlags(cmd, p, true)
	return cmd
}

func newBenchReplayCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Load-and-replay time, events/s and memory per event for histories of 10 to 100,000 events",
		Long: benchLong + `

replay builds one task per entry of --sizes whose history has exactly that
many events (task_scheduled, attempt_started, step_completed × (size-3),
task_completed), written through the engine as a worker writes them: a
claim, then appends fenced by the lease epoch, in chunks of 2,000 events.
It then loads each history (Store.EventList) and replays it
(history.Replay) repeatedly and reports the median times, events/s, and
bytes and allocations per event (runtime.MemStats).`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Replay(cmd.Context(), cfg, *p)
		}),
	}
	cmd.Flags().IntSliceVar(&p.Sizes, "sizes", []int{10, 100, 1_000, 10_000, 100_000}, "history lengths in events")
	cmd.Flags().StringVar(&p.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the loads and replays (not the builds) to this file")
	return cmd
}

func newBenchScaleCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Drain rate with 1, 2 and 4 worker processes against one database",
		Long: benchLong + `

scale runs one drain per entry of --processes: it resets the schema, inserts
--tasks tasks, spawns that many worker processes (this binary, as the hidden
"cairn bench worker"), each with --concurrency slots and a pool of
--max-conns, waits until they are connected, starts them all at once, and
measures the drain as throughput does. Then, the processes idle, it starts
one-step tasks at --rate for --duration and reports the start latency: from
each Start call to the task's first claim (after a VACUUM of the drained
tables, unless --vacuum=false).`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Scale(cmd.Context(), cfg, *p)
		}),
	}
	addBenchTasksFlag(cmd, p, 50_000)
	cmd.Flags().IntVar(&p.Steps, "steps", 1, "no-op steps per task")
	cmd.Flags().IntSliceVar(&p.Processes, "processes", []int{1, 2, 4}, "worker process counts, one drain each")
	cmd.Flags().IntVar(&p.Rate, "rate", 100, "tasks started per second to time start latency after each drain, the processes idle")
	cmd.Flags().DurationVar(&p.Duration, "duration", 10*time.Second, "how long each start-latency run produces (0: no start latency)")
	cmd.Flags().BoolVar(&p.Vacuum, "vacuum", true, "VACUUM (ANALYZE) the tables after each drain, before its start-latency run, as autovacuum would")
	addBenchWorkerFlags(cmd, p, false)
	addBenchDrainFlags(cmd, p)
	return cmd
}

func newBenchWaitingCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	var vacuum bool
	cmd := &cobra.Command{
		Use:   "waiting",
		Short: "What tasks waiting for a signal cost an idle database: rows read a second with 1,000 and 50,000 waiting",
		Long: benchLong + `

waiting runs once per entry of --waiting: it resets the schema, starts that
many tasks whose workflow receives a signal (with a 30-day timeout, like an
approval), and lets one worker (default settings, --concurrency slots) park
them all: each attempt ends with wait_started and holds no slot. It then
vacuums the tables unless --vacuum=false (as autovacuum would once they
stop changing), waits 12s
for the backends' statistics to arrive, and reads PostgreSQL's statistics
(pg_stat_user_tables, pg_stat_user_indexes, pg_stat_database) before and
after --window while only that idle worker runs. The report gives the rows
and index entries read a second in the bench's tables, by relation, and
the ratio of the largest waiting set's reads to the smallest's (1: reads
independent of the number of waiting tasks). PostgreSQL only.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Waiting(cmd.Context(), cfg, *p, vacuum)
		}),
	}
	cmd.Flags().IntSliceVar(&p.Waiting, "waiting", []int{1_000, 50_000}, "sizes of the waiting set, one run each")
	cmd.Flags().DurationVar(&p.Window, "window", 30*time.Second, "how long each run reads the database's statistics")
	cmd.Flags().IntVar(&p.Batch, "batch", 5000, "tasks per Client.StartMany call when starting")
	cmd.Flags().BoolVar(&vacuum, "vacuum", true, "VACUUM (ANALYZE) the tables once the tasks are parked, as autovacuum would")
	addBenchWorkerFlags(cmd, p, false)
	return cmd
}

// newBenchWorkerCmd is the process `cairn bench scale` spawns; the bench
// package starts it with --schema, --namespace, --concurrency and
// --max-conns, and the database URL in CAIRN_DATABASE_URL.
func newBenchWorkerCmd(g *globals) *cobra.Command {
	p := &bench.Params{}
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "A bench worker process, spawned by `cairn bench scale`",
		Hidden: true,
		Long: `A worker process for "cairn bench scale": it connects, prints "ready",
starts working when a line "start" arrives on stdin, and shuts down
gracefully when stdin closes or on SIGINT/SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Worker(cmd.Context(), cfg, *p)
		}),
	}
	addBenchWorkerFlags(cmd, p, false)
	cmd.Flags().StringVar(&p.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the process from its start line to its stop to this file")
	return cmd
}

func newBenchAuditCmd(g *globals) *cobra.Command {
	p := &bench.AuditParams{}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Time Client.Audit over a million events: a selective filter, the same without SQL narrowing, everything",
		Long: benchLong + `

audit writes about --events events in bulk SQL (tasks of 10 events: a
scheduled task, an attempt, seven steps, completion; one task in five fails
its first attempt with HTTP 429, 503 or 500 and succeeds on the second, 12
events), about a thousand a second, in the past. It then times
Client.Audit over their whole time range: with a selective filter the
database narrows by event type, with an equivalent filter it cannot narrow
(CEL decides on every event), and with no filter. Each runs --reps times;
the median is reported.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Audit(cmd.Context(), cfg, *p)
		}),
	}
	cmd.Flags().IntVar(&p.Events, "events", 1_000_000, "events to write (about; tasks have 10 or 12)")
	cmd.Flags().IntVar(&p.Reps, "reps", 3, "times each audit runs")
	return cmd
}

func newBenchChildrenCmd(g *globals) *cobra.Command {
	p := &bench.ChildrenParams{}
	cmd := &cobra.Command{
		Use:   "children",
		Short: "Fan-out: one parent workflow with -n children (workflow.MapChildren); time and CPU per child, parent wakes",
		Long: benchLong + `

children starts --workers in-process workers, then one parent workflow
whose workflow.MapChildren starts -n children that return their input, and
waits until every task has finished. It reports the wall time from the
parent's start, the CPU of this process (the workers, parent and children
alike, run in it: getrusage; the database's CPU is not counted), both per
child, the parent's attempts (one per wake) and its history's length.

--strategy flat is one parent starting every child (workflow.MapChildren);
tree is one parent starting a chunk child per --chunk children
(workflow.MapChunks), each chunk the parent of its children; auto is flat
up to --chunk children, a tree above. The MaxRunningChildren of the parent
and the chunk types is --max-running (0: the default, 100).`,
		Args: cobra.NoArgs,
		RunE: benchRunE(g, func(cmd *cobra.Command, cfg bench.Config) error {
			return bench.Children(cmd.Context(), cfg, *p)
		}),
	}
	cmd.Flags().IntVarP(&p.Children, "children", "n", 1_000, "children of the one parent")
	cmd.Flags().IntVar(&p.Workers, "workers", 1, "in-process workers (each with --concurrency slots) sharing one pool")
	cmd.Flags().IntVar(&p.Concurrency, "concurrency", 200, "tasks one worker runs at once")
	cmd.Flags().IntVar(&p.MaxConns, "max-conns", 16, "connections in the workers' pool")
	cmd.Flags().IntVar(&p.MaxRunning, "max-running", 0, "the parent type's MaxRunningChildren (0: the default, 100)")
	cmd.Flags().StringVar(&p.Strategy, "strategy", bench.StrategyAuto, "flat (one parent starts every child), tree (chunks of --chunk children, workflow.MapChunks) or auto (flat up to --chunk children)")
	cmd.Flags().IntVar(&p.Chunk, "chunk", 1_000, "children per chunk of a tree")
	cmd.Flags().DurationVar(&p.Timeout, "timeout", 30*time.Minute, "give up after this long")
	cmd.Flags().DurationVar(&p.DrainPoll, "poll-interval", bench.DefaultDrainPoll, "how often the run asks the database whether all tasks are done")
	cmd.Flags().StringVar(&p.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	return cmd
}
