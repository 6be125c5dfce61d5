package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
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
	// StartLatency is from each Start call to its task's first claim,
	// with the processes idle after the drain and tasks started at
	// --rate for --duration (absent with --duration 0).
	StartLatency *latencyPercentiles `json:"start_latency,omitempty"`
}

type scaleReport struct {
	benchHeader
	Params drainParams `json:"params"`
	Runs   []scaleRun  `json:"runs"`
}

// Scale runs one drain per entry of p.Processes: it resets the schema,
// inserts p.Tasks tasks, spawns that many worker processes (this binary, as
// `cairn bench worker`, running [Worker]), starts them all at once and
// measures the drain as [Throughput] does. PostgreSQL only.
func Scale(ctx context.Context, cfg Config, p Params) error {
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.validateDrain(); err != nil {
		return err
	}
	if err := positive(
		intFlag{"steps", f.Steps},
		intFlag{"concurrency", f.Concurrency},
		intFlag{"max-conns", f.MaxConns},
		intFlag{"processes", len(f.Processes)},
	); err != nil {
		return err
	}
	if f.Duration > 0 {
		if err := positive(intFlag{"rate", f.Rate}); err != nil {
			return err
		}
	}
	env, closeEnv, err := openBench(ctx, cfg, "scale")
	if err != nil {
		return err
	}
	defer closeEnv()
	var runs []scaleRun
	for _, procs := range f.Processes {
		r, err := runScaleOnce(ctx, env, f, procs)
		if err != nil {
			return errors.Wrapf(err, "scale run with %d processes", procs)
		}
		r.Speedup = 1
		if len(runs) > 0 && runs[0].DrainPerSecond > 0 {
			r.Speedup = r.DrainPerSecond / runs[0].DrainPerSecond
		}
		runs = append(runs, r)
	}
	params := f.drainParams(f.Steps)
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, scaleReport{benchHeader: env.header, Params: params, Runs: runs})
	}
	w := newTable(env.cfg.Stdout)
	fmt.Fprintf(w, "mode:\tscale: %d tasks of %d no-op step(s) per run; each process %d slots, pool of %d\n",
		f.Tasks, f.Steps, f.Concurrency, f.MaxConns)
	fmt.Fprintf(w, "drain:\tworker start → poll saw all completed (poll every %.0f ms)\n", params.DrainPollMs)
	if f.Duration > 0 {
		fmt.Fprintf(w, "start latency:\tStart call → first claim (the task's started_at), %d tasks/s for %s against the idle processes\n", f.Rate, f.Duration)
	}
	printBenchEnv(w, env.header)
	fmt.Fprintf(w, "\nPROCESSES\tINSERT/S\tDRAIN S\tDRAIN TASKS/S\tSTEPS/S\tLAST COMPLETION S\tSPEEDUP\tSTART P50/P99/MAX MS\n")
	for _, r := range runs {
		lat := "-"
		if l := r.StartLatency; l != nil {
			lat = fmt.Sprintf("%.2f / %.2f / %.2f", l.P50, l.P99, l.Max)
		}
		fmt.Fprintf(w, "%d\t%.0f\t%.3f\t%.0f\t%.0f\t%.3f\t%.2f×\t%s\n", r.Processes, r.InsertPerSecond, r.DrainSeconds,
			r.DrainPerSecond, r.StepsPerSecond, r.LastCompletionSeconds, r.Speedup, lat)
	}
	return w.Flush()
}

func runScaleOnce(ctx context.Context, env *benchEnv, f *Params, procs int) (scaleRun, error) {
	if err := env.reset(ctx); err != nil {
		return scaleRun{}, err
	}
	insert, err := env.insertBacklog(ctx, f.Tasks, f.Steps, f.Batch, f.InputBytes)
	if err != nil {
		return scaleRun{}, err
	}
	if err := env.obs.analyze(ctx); err != nil {
		return scaleRun{}, err
	}
	env.logf("%d process(es): inserted %d tasks in %s; spawning workers", procs, f.Tasks, insert.Round(time.Millisecond))
	children, err := spawnBenchWorkers(ctx, &env.cfg, procs, f.Concurrency, f.MaxConns)
	// Stop (or kill) every child spawned, whatever happens next.
	defer func() { _ = children.stop() }()
	if err != nil {
		return scaleRun{}, err
	}
	timing, err := env.awaitDrain(ctx, children.start, f.DrainPoll, f.Timeout, 0)
	if err != nil {
		return scaleRun{}, err
	}
	// The drain's figures are read before the latency run adds tasks.
	res, err := env.result(ctx, f.Tasks, f.Steps, insert, timing)
	if err != nil {
		return scaleRun{}, err
	}
	env.logf("%d process(es): drained in %.3f s (%.0f tasks/s)", procs, res.DrainSeconds, res.DrainPerSecond)
	run := scaleRun{Processes: procs, drainResult: res}
	if f.Duration > 0 {
		if f.Vacuum {
			// What autovacuum does once the drain's dead rows pass its
			// threshold; without it, every claim of the idle processes
			// steps over the index entries of the tasks just drained
			// (measured: an empty claim 1.5 ms instead of 0.15).
			if _, err := env.obs.pool.Exec(ctx, env.obs.q("TablesVacuum")); err != nil {
				return scaleRun{}, errors.Wrap(err, "vacuum the bench tables")
			}
		}
		lat, err := env.startLatency(ctx, f.Rate, f.Duration, f.Timeout)
		if err != nil {
			return scaleRun{}, err
		}
		run.StartLatency = &lat
		env.logf("%d process(es): start latency p50 %.2f ms, p99 %.2f ms", procs, lat.P50, lat.P99)
	}
	if err := children.stop(); err != nil {
		return scaleRun{}, err
	}
	return run, nil
}

// startLatency starts one-step tasks at rate a second for d, open loop
// (each Start on a goroutine of its own, so a slow one delays no other),
// against workers already running elsewhere, waits until every one has
// been claimed, and returns the percentiles of claim time (started_at, the
// database's clock at the claim) less start time (created_at, the Start
// call's clock). Both clocks are this machine's.
func (e *benchEnv) startLatency(ctx context.Context, rate int, d, timeout time.Duration) (latencyPercentiles, error) {
	c, err := sdk.NewClient(e.clientConfig())
	if err != nil {
		return latencyPercentiles{}, err
	}
	defer c.Close()
	input, err := json.Marshal(paddedInput(1, 0))
	if err != nil {
		return latencyPercentiles{}, errors.Wrap(err, "encode bench input")
	}
	wf := sdk.TypeRef{Name: benchNoopType, Version: 1}
	var (
		mu     sync.Mutex
		ids    []uuid.UUID
		errs   error
		starts sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := int(d.Seconds() * float64(rate)); n > 0; n-- {
		select {
		case <-ctx.Done():
			return latencyPercentiles{}, ctx.Err()
		case <-tick.C:
		}
		starts.Go(func() {
			res, err := c.StartDynamic(ctx, wf, json.RawMessage(input), nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = errors.CombineErrors(errs, err)
				return
			}
			ids = append(ids, res.ID)
		})
	}
	starts.Wait()
	if errs != nil {
		return latencyPercentiles{}, errors.Wrap(errs, "start latency tasks")
	}
	return e.obs.claimLatency(ctx, ids, timeout)
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
// the caller to stop. A child is this binary run as `cairn bench worker`
// with the flags cmd/cairn gives that command.
func spawnBenchWorkers(ctx context.Context, cfg *Config, n, concurrency, maxConns int) (*benchChildren, error) {
	cs := &benchChildren{}
	exe, err := os.Executable()
	if err != nil {
		return cs, errors.Wrap(err, "find the cairn binary")
	}
	for range n {
		c := exec.Command(exe, "bench", "worker", "--schema", cfg.Schema, "--namespace", cfg.Namespace,
			"--concurrency", strconv.Itoa(concurrency), "--max-conns", strconv.Itoa(maxConns))
		// The URL goes by environment, not argument, so no password shows
		// in the process list.
		c.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+cfg.DatabaseURL)
		c.Stderr = cfg.Stderr
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

// Worker is a worker process of [Scale]: it connects, prints "ready" on
// cfg.Stdout, starts working when a line "start" arrives on cfg.Stdin, and
// shuts down gracefully when cfg.Stdin closes or ctx is cancelled.
func Worker(ctx context.Context, cfg Config, p Params) error {
	cfg = cfg.withDefaults()
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if err := positive(intFlag{"concurrency", f.Concurrency}, intFlag{"max-conns", f.MaxConns}); err != nil {
		return err
	}
	pool, err := cfg.connect(ctx, int32(f.MaxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := newBenchWorker(pool, &cfg, f.Concurrency, nil)
	if err != nil {
		return err
	}
	// stdin carries the parent's orders: a start line, then EOF to stop.
	// The reader ends at EOF, which comes at the latest when the parent
	// exits.
	lines := make(chan string, 1) // at most one line is sent: the reader never blocks
	go readFirstLine(cfg.Stdin, lines)
	fmt.Fprintln(cfg.Stdout, benchWorkerReady)
	select {
	case <-ctx.Done():
		return nil
	case line, ok := <-lines:
		if !ok || line != benchWorkerStart {
			return nil
		}
	}
	stopProfile, err := startCPUProfile(f.CPUProfile)
	if err != nil {
		return err
	}
	defer func() { _ = stopProfile() }()
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
