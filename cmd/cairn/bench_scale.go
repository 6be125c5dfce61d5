package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"
)

// scale: drains with several worker processes. The parent spawns this
// binary as the hidden `cairn bench worker`, which connects, says "ready" on
// stdout, starts on a "start" line on stdin, and stops gracefully when stdin
// closes.

const (
	benchWorkerReady = "ready"
	benchWorkerStart = "start"
	// benchChildTimeout bounds a child's start-up and its graceful exit.
	benchChildTimeout = 30 * time.Second
)

// scaleRun is one process count's drain.
type scaleRun struct {
	Processes int `json:"processes"`
	drainResult
	// Speedup is this run's drain rate over the first run's.
	Speedup float64 `json:"speedup"`
}

type scaleReport struct {
	benchHeader
	Params drainParams `json:"params"`
	Runs   []scaleRun  `json:"runs"`
}

func newBenchScaleCmd(g *globals) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Drain rate with 1, 2 and 4 worker processes against one database",
		Long: benchLong + `

scale runs one drain per entry of --processes: it resets the schema, inserts
--tasks tasks, spawns that many worker processes (this binary, as the hidden
"cairn bench worker"), each with --concurrency slots and a pool of
--max-conns, waits until they are connected, starts them all at once, and
measures the drain as throughput does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runScale(cmd, g, f)
		},
	}
	f.addTasks(cmd, 50_000)
	cmd.Flags().IntVar(&f.steps, "steps", 1, "no-op steps per task")
	cmd.Flags().IntSliceVar(&f.processes, "processes", []int{1, 2, 4}, "worker process counts, one drain each")
	f.addWorkerFlags(cmd, false)
	f.addDrainFlags(cmd)
	return cmd
}

func runScale(cmd *cobra.Command, g *globals, f *benchFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.validateDrain(); err != nil {
		return err
	}
	if err := positive(
		intFlag{"steps", f.steps},
		intFlag{"concurrency", f.concurrency},
		intFlag{"max-conns", f.maxConns},
		intFlag{"processes", len(f.processes)},
	); err != nil {
		return err
	}
	ctx := cmd.Context()
	env, closeEnv, err := openBench(cmd, g, "scale")
	if err != nil {
		return err
	}
	defer closeEnv()
	var runs []scaleRun
	for _, procs := range f.processes {
		r, err := runScaleOnce(ctx, cmd, env, f, procs)
		if err != nil {
			return errors.Wrapf(err, "scale run with %d processes", procs)
		}
		r.Speedup = 1
		if len(runs) > 0 && runs[0].DrainPerSecond > 0 {
			r.Speedup = r.DrainPerSecond / runs[0].DrainPerSecond
		}
		runs = append(runs, r)
	}
	params := f.drainParams(f.steps)
	if g.output == "json" {
		return printJSON(cmd, scaleReport{benchHeader: env.header, Params: params, Runs: runs})
	}
	w := newTable(cmd)
	p := params
	fmt.Fprintf(w, "mode:\tscale: %d tasks of %d no-op step(s) per run; each process %d slots, pool of %d\n",
		f.tasks, f.steps, f.concurrency, f.maxConns)
	fmt.Fprintf(w, "drain:\tworker start → poll saw all completed (poll every %.0f ms)\n", p.DrainPollMs)
	printBenchEnv(w, env.header)
	fmt.Fprintf(w, "\nPROCESSES\tINSERT/S\tDRAIN S\tDRAIN TASKS/S\tSTEPS/S\tLAST COMPLETION S\tSPEEDUP\n")
	for _, r := range runs {
		fmt.Fprintf(w, "%d\t%.0f\t%.3f\t%.0f\t%.0f\t%.3f\t%.2f×\n", r.Processes, r.InsertPerSecond, r.DrainSeconds,
			r.DrainPerSecond, r.StepsPerSecond, r.LastCompletionSeconds, r.Speedup)
	}
	return w.Flush()
}

func runScaleOnce(ctx context.Context, cmd *cobra.Command, env *benchEnv, f *benchFlags, procs int) (scaleRun, error) {
	if err := env.reset(ctx); err != nil {
		return scaleRun{}, err
	}
	insert, err := env.insertBacklog(ctx, f.tasks, f.steps, f.batch)
	if err != nil {
		return scaleRun{}, err
	}
	if err := env.obs.analyze(ctx); err != nil {
		return scaleRun{}, err
	}
	env.logf("%d process(es): inserted %d tasks in %s; spawning workers", procs, f.tasks, insert.Round(time.Millisecond))
	children, err := spawnBenchWorkers(ctx, cmd, env.g, procs, f.concurrency, f.maxConns)
	// Stop (or kill) every child spawned, whatever happens next.
	defer func() { _ = children.stop() }()
	if err != nil {
		return scaleRun{}, err
	}
	timing, err := env.awaitDrain(ctx, children.start, f.drainPoll, f.timeout)
	if err != nil {
		return scaleRun{}, err
	}
	if err := children.stop(); err != nil {
		return scaleRun{}, err
	}
	res, err := env.result(ctx, f.tasks, f.steps, insert, timing)
	if err != nil {
		return scaleRun{}, err
	}
	env.logf("%d process(es): drained in %.3f s (%.0f tasks/s)", procs, res.DrainSeconds, res.DrainPerSecond)
	return scaleRun{Processes: procs, drainResult: res}, nil
}

// benchChildren are the worker processes of one scale run.
type benchChildren struct {
	procs    []*benchChild
	stopOnce sync.Once
	stopErr  error
}

type benchChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan error // size 1: one value, nil once the child said it is ready
	// readerDone is closed when the child's stdout reaches EOF, i.e. it
	// exited; only then may cmd.Wait be called.
	readerDone chan struct{}
}

// spawnBenchWorkers starts n worker processes and waits until each is
// connected and ready. It returns the children spawned even on error, for
// the caller to stop.
func spawnBenchWorkers(ctx context.Context, cmd *cobra.Command, g *globals, n, concurrency, maxConns int) (*benchChildren, error) {
	cs := &benchChildren{}
	exe, err := os.Executable()
	if err != nil {
		return cs, errors.Wrap(err, "find the cairn binary")
	}
	for range n {
		c := exec.Command(exe, "bench", "worker", "--schema", g.schema, "--namespace", g.namespace,
			"--concurrency", strconv.Itoa(concurrency), "--max-conns", strconv.Itoa(maxConns))
		// The URL goes by environment, not argument, so no password shows
		// in the process list.
		c.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+g.databaseURL)
		c.Stderr = cmd.ErrOrStderr()
		stdin, err := c.StdinPipe()
		if err != nil {
			return cs, errors.Wrap(err, "spawn bench worker")
		}
		stdout, err := c.StdoutPipe()
		if err != nil {
			return cs, errors.Wrap(err, "spawn bench worker")
		}
		if err := c.Start(); err != nil {
			return cs, errors.Wrap(err, "spawn bench worker")
		}
		child := &benchChild{cmd: c, stdin: stdin, ready: make(chan error, 1), readerDone: make(chan struct{})}
		cs.procs = append(cs.procs, child)
		// Ends when the child exits and its stdout reaches EOF; stop waits
		// for it.
		go child.readStdout(stdout)
	}
	timer := time.NewTimer(benchChildTimeout)
	defer timer.Stop()
	for i, child := range cs.procs {
		select {
		case err := <-child.ready:
			if err != nil {
				return cs, errors.Wrapf(err, "bench worker %d", i+1)
			}
		case <-ctx.Done():
			return cs, ctx.Err()
		case <-timer.C:
			return cs, errors.Newf("bench worker %d not ready after %s", i+1, benchChildTimeout)
		}
	}
	return cs, nil
}

// readStdout reports the child's "ready" line, then discards the rest.
func (c *benchChild) readStdout(r io.Reader) {
	defer close(c.readerDone)
	sc := bufio.NewScanner(r)
	switch {
	case !sc.Scan():
		c.ready <- errors.New("exited before it was ready (see its messages above)")
	case sc.Text() != benchWorkerReady:
		c.ready <- errors.Newf("said %q instead of %q", sc.Text(), benchWorkerReady)
	default:
		c.ready <- nil
	}
	_, _ = io.Copy(io.Discard, r)
}

// start tells every child to start working.
func (cs *benchChildren) start() error {
	for i, c := range cs.procs {
		if _, err := io.WriteString(c.stdin, benchWorkerStart+"\n"); err != nil {
			return errors.Wrapf(err, "start bench worker %d", i+1)
		}
	}
	return nil
}

// stop closes every child's stdin, which makes it shut down gracefully,
// and waits; a child still running after benchChildTimeout is killed. It is
// idempotent.
func (cs *benchChildren) stop() error {
	cs.stopOnce.Do(func() {
		for _, c := range cs.procs {
			_ = c.stdin.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), benchChildTimeout)
		defer cancel()
		for i, c := range cs.procs {
			select {
			case <-c.readerDone:
			case <-ctx.Done():
				_ = c.cmd.Process.Kill()
				<-c.readerDone
			}
			if err := c.cmd.Wait(); err != nil {
				cs.stopErr = errors.CombineErrors(cs.stopErr, errors.Wrapf(err, "bench worker %d", i+1))
			}
		}
	})
	return cs.stopErr
}

func newBenchWorkerCmd(g *globals) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "A bench worker process, spawned by `cairn bench scale`",
		Hidden: true,
		Long: `A worker process for "cairn bench scale": it connects, prints "ready",
starts working when a line "start" arrives on stdin, and shuts down
gracefully when stdin closes or on SIGINT/SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchWorker(cmd, g, f)
		},
	}
	f.addWorkerFlags(cmd, false)
	return cmd
}

func runBenchWorker(cmd *cobra.Command, g *globals, f *benchFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := positive(intFlag{"concurrency", f.concurrency}, intFlag{"max-conns", f.maxConns}); err != nil {
		return err
	}
	ctx := cmd.Context()
	wg := *g
	if !cmd.Flags().Changed("schema") {
		wg.schema = defaultBenchSchema
	}
	pool, err := wg.connect(ctx, int32(f.maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := newBenchWorker(pool, &wg, f.concurrency, nil)
	if err != nil {
		return err
	}
	// stdin carries the parent's orders: a start line, then EOF to stop.
	// The reader ends at EOF, which comes at the latest when the parent
	// exits.
	lines := make(chan string, 1) // at most one line is sent: the reader never blocks
	go readFirstLine(cmd.InOrStdin(), lines)
	fmt.Fprintln(cmd.OutOrStdout(), benchWorkerReady)
	select {
	case <-ctx.Done():
		return nil
	case line, ok := <-lines:
		if !ok || line != benchWorkerStart {
			return nil
		}
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-lines:
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), benchChildTimeout)
	defer cancel()
	return errors.Wrap(w.Stop(stopCtx), "graceful shutdown")
}

// readFirstLine sends the first line of r, reads on to EOF, then closes
// lines.
func readFirstLine(r io.Reader, lines chan<- string) {
	defer close(lines)
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	lines <- line[:len(line)-1]
	_, _ = io.Copy(io.Discard, br)
}
