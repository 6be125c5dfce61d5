package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// Drain modes: throughput and workflow (in-process workers) and scale
// (worker processes). Each run resets the schema, inserts the backlog with
// Client.StartMany, then starts the workers and polls the database until
// every task is finished.

// drainParams are the settings of a drain run, as reported.
type drainParams struct {
	Tasks        int     `json:"tasks"`
	StepsPerTask int     `json:"steps_per_task"`
	Workers      int     `json:"workers,omitempty"`
	Processes    []int   `json:"processes,omitempty"`
	Concurrency  int     `json:"concurrency"`
	MaxConns     int     `json:"max_conns"`
	InsertBatch  int     `json:"insert_batch"`
	WorkerPollMs float64 `json:"worker_poll_interval_ms"`
	DrainPollMs  float64 `json:"drain_poll_interval_ms"`
	// FinishedBefore is --finished: ballast tasks already finished.
	FinishedBefore int `json:"finished_before"`
	// Metrics is --metrics: the workers counted Prometheus metrics.
	Metrics bool `json:"metrics"`
	// InputBytes is --input-bytes: the length of each task's input.
	InputBytes int `json:"input_bytes"`
	// RetentionSeconds is --retention: the workers' default retention.
	RetentionSeconds float64 `json:"retention_seconds"`
}

func (f *Params) drainParams(steps int) drainParams {
	return drainParams{
		Tasks: f.Tasks, StepsPerTask: steps, Workers: f.Workers, Processes: f.Processes,
		Concurrency: f.Concurrency, MaxConns: f.MaxConns, InsertBatch: f.Batch,
		WorkerPollMs: ms(benchWorkerPollInterval), DrainPollMs: ms(f.DrainPoll),
		FinishedBefore: f.Finished, Metrics: f.Metrics, InputBytes: f.InputBytes, RetentionSeconds: f.Retention.Seconds(),
	}
}

// drainResult is one drain's figures.
type drainResult struct {
	InsertSeconds   float64 `json:"insert_seconds"`
	InsertPerSecond float64 `json:"insert_per_second"`
	// DrainSeconds runs from the workers' start to the poll that saw every
	// task finished; it is known to the poll interval.
	DrainSeconds   float64 `json:"drain_seconds"`
	DrainPerSecond float64 `json:"drain_per_second"`
	StepsPerSecond float64 `json:"steps_per_second"`
	// LastCompletionSeconds runs from the workers' start to the latest
	// finished_at recorded (the writer's clock, same host): the drain time
	// without poll granularity.
	LastCompletionSeconds float64 `json:"last_completion_seconds"`
	// FinishedLeft is how many --finished tasks were still there after the
	// drain (fewer than put in when --retention removed some meanwhile).
	FinishedLeft int64 `json:"finished_left"`
	Completed    int64 `json:"completed"`
	NotCompleted int64 `json:"not_completed"`
	// EventsWritten counts every event in the schema, task_scheduled
	// included; DrainEventsPerSecond counts those the drain wrote.
	EventsWritten        int64   `json:"events_written"`
	EventsPerTask        float64 `json:"events_per_task"`
	DrainEventsPerSecond float64 `json:"drain_events_per_second"`
	Polls                int     `json:"polls"`
	PollQueryMsAvg       float64 `json:"poll_query_ms_avg"`
	// Counted: the drain's end is the done notification that named the
	// last task (checked by one poll after it), not a poll's.
	Counted bool `json:"counted"`
}

// drainReport is the JSON of throughput and workflow.
type drainReport struct {
	benchHeader
	Params drainParams `json:"params"`
	drainResult
}

// insertBacklog inserts tasks workflows of steps steps in batches.
func (e *benchEnv) insertBacklog(ctx context.Context, tasks, steps, batch, inputBytes int) (time.Duration, error) {
	c, err := sdk.NewClient(e.clientConfig())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	input, err := json.Marshal(paddedInput(steps, inputBytes))
	if err != nil {
		return 0, errors.Wrap(err, "encode bench input")
	}
	wf := sdk.TypeRef{Name: benchNoopType, Version: 1}
	params := make([]sdk.StartParams, 0, batch)
	started := time.Now()
	for done := 0; done < tasks; {
		k := min(batch, tasks-done)
		params = params[:0]
		for range k {
			params = append(params, sdk.StartParams{Workflow: wf, Input: json.RawMessage(input)})
		}
		if _, err := c.StartMany(ctx, params); err != nil {
			return 0, errors.Wrapf(err, "insert tasks %d to %d", done+1, done+k)
		}
		done += k
	}
	return time.Since(started), nil
}

// drainTiming is what awaitDrain observed.
type drainTiming struct {
	start    time.Time
	drain    time.Duration
	polls    int
	pollTime time.Duration
	counted  bool // the end came from counting done notifications
}

// awaitDrain calls start (which starts the workers) and polls every every
// until no task is unfinished, or timeout passes. With expect > 0 on
// PostgreSQL it counts the tasks the workers' done notifications name
// instead, as River's bench counts its completed events, and asks the
// database once they make expect: a poll every 10 ms was 3 µs of
// PostgreSQL's CPU a task in a drain of 100,000 (each walks the claim
// index past the entries of the tasks claimed so far), charged to cairn
// though no user's deployment pays it.
func (e *benchEnv) awaitDrain(ctx context.Context, start func() error, every, timeout time.Duration, expect int) (drainTiming, error) {
	poll, closePoll, err := e.openPoll(ctx)
	if err != nil {
		return drainTiming{}, err
	}
	defer closePoll()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	counter, counting := poll.(doneCounter)
	if counting && expect > 0 {
		if err := counter.listenDone(ctx); err != nil {
			return drainTiming{}, err
		}
	}
	t := drainTiming{start: time.Now()}
	if err := start(); err != nil {
		return t, err
	}
	if counting && expect > 0 {
		if err := e.countDone(ctx, counter, &t, expect); err != nil {
			return t, err
		}
		// Counted: one poll says whether every task is done (then the
		// drain ended with the last notification), else it goes on as
		// below.
		busy, err := poll.anyUnfinished(ctx)
		if err != nil {
			return t, err
		}
		t.polls++
		if !busy {
			t.counted = true
			return t, nil
		}
		e.logf("  done notifications named %d tasks, but some are unfinished: polling", expect)
		t.drain = 0
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	lastReport := t.start
	for {
		select {
		case <-ctx.Done():
			return t, errors.Wrapf(ctx.Err(), "drain not finished after %s", time.Since(t.start).Round(time.Millisecond))
		case <-ticker.C:
		}
		q := time.Now()
		busy, err := poll.anyUnfinished(ctx)
		now := time.Now()
		if err != nil {
			return t, err
		}
		t.polls++
		t.pollTime += now.Sub(q)
		if !busy {
			t.drain = now.Sub(t.start)
			return t, nil
		}
		if now.Sub(lastReport) >= time.Second {
			left, err := poll.unfinished(ctx)
			if err != nil {
				return t, err
			}
			e.logf("  %d tasks left after %s", left, now.Sub(t.start).Round(time.Millisecond))
			lastReport = time.Now()
		}
	}
}

// countDone waits until the done notifications have named expect tasks,
// setting t.drain at the notification that made the count, and reports
// progress once a second.
func (e *benchEnv) countDone(ctx context.Context, counter doneCounter, t *drainTiming, expect int) error {
	finished, lastReport := 0, t.start
	for finished < expect {
		n, err := counter.waitDone(ctx, time.Second)
		if err != nil {
			return errors.Wrapf(err, "drain not finished after %s", time.Since(t.start).Round(time.Millisecond))
		}
		finished += n
		now := time.Now()
		if finished >= expect {
			t.drain = now.Sub(t.start)
			return nil
		}
		if now.Sub(lastReport) >= time.Second {
			e.logf("  %d tasks left after %s", expect-finished, now.Sub(t.start).Round(time.Millisecond))
			lastReport = now
		}
	}
	return nil
}

// result reads the database's account of the drain and computes the
// figures.
func (e *benchEnv) result(ctx context.Context, tasks, steps int, insert time.Duration, t drainTiming) (drainResult, error) {
	s, err := e.summary(ctx)
	if err != nil {
		return drainResult{}, err
	}
	s.events -= 4 * s.prefillLeft
	n := int64(tasks)
	r := drainResult{
		InsertSeconds: insert.Seconds(), InsertPerSecond: perSecond(n, insert),
		DrainSeconds: t.drain.Seconds(), DrainPerSecond: perSecond(n, t.drain),
		StepsPerSecond: perSecond(n*int64(steps), t.drain),
		Completed:      s.completed, NotCompleted: n - s.completed,
		EventsWritten: s.events, DrainEventsPerSecond: perSecond(s.events-n, t.drain), FinishedLeft: s.prefillLeft,
		Polls: t.polls, Counted: t.counted,
	}
	if tasks > 0 {
		r.EventsPerTask = float64(s.events) / float64(tasks)
	}
	if t.polls > 0 {
		r.PollQueryMsAvg = ms(t.pollTime / time.Duration(t.polls))
	}
	if s.lastFinished != nil {
		r.LastCompletionSeconds = s.lastFinished.Sub(t.start).Seconds()
	}
	if s.completed != n {
		return r, errors.Newf("%d of %d tasks completed (%d failed, cancelled or dead-lettered): the figures are not valid",
			s.completed, n, s.otherTerminal)
	}
	return r, nil
}

// Throughput inserts p.Tasks single-step no-op tasks (Client.StartMany in
// batches of p.Batch), then drains them with p.Workers in-process workers
// and reports the insert and drain rates.
func Throughput(ctx context.Context, cfg Config, p Params) error {
	return runInProcessDrain(ctx, cfg, &p, "throughput", 1)
}

// Workflow is [Throughput] with p.Steps no-op steps per workflow, each
// recorded before the next runs: workflows/s and steps/s.
func Workflow(ctx context.Context, cfg Config, p Params) error {
	return runInProcessDrain(ctx, cfg, &p, "workflow", p.Steps)
}

// runInProcessDrain is throughput and workflow: reset, insert, then drain
// with f.Workers in-process workers sharing one pool.
func runInProcessDrain(ctx context.Context, cfg Config, f *Params, mode string, steps int) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.validateDrain(); err != nil {
		return err
	}
	if err := positive(
		intFlag{"steps", steps},
		intFlag{"workers", f.Workers},
		intFlag{"concurrency", f.Concurrency},
		intFlag{"max-conns", f.MaxConns},
	); err != nil {
		return err
	}
	env, closeEnv, err := openBench(ctx, cfg, mode)
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	if f.Finished > 0 {
		started := time.Now()
		if err := env.prefillFinished(ctx, f.Finished); err != nil {
			return err
		}
		env.logf("prefilled %d finished tasks (%d events) in %s", f.Finished, 4*f.Finished, time.Since(started).Round(time.Millisecond))
	}
	stopInsertProfile, err := startCPUProfile(f.InsertCPU)
	if err != nil {
		return err
	}
	insert, err := env.insertBacklog(ctx, f.Tasks, steps, f.Batch, f.InputBytes)
	if err != nil {
		_ = stopInsertProfile()
		return err
	}
	if err := stopInsertProfile(); err != nil {
		return err
	}
	env.logf("inserted %d tasks of %d step(s) in %s (%.0f/s)", f.Tasks, steps, insert.Round(time.Millisecond), perSecond(int64(f.Tasks), insert))
	if err := env.analyze(ctx); err != nil {
		return err
	}
	target, closeTarget, err := env.target(ctx, f.MaxConns)
	if err != nil {
		return err
	}
	defer closeTarget()
	metrics, reg, err := f.newMetrics()
	if err != nil {
		return err
	}
	workers := make([]*sdk.Worker, 0, f.Workers)
	for range f.Workers {
		w, err := newBenchWorkerWithMetrics(target, &env.cfg, f.Concurrency, nil, metrics, f.Retention)
		if err != nil {
			return err
		}
		workers = append(workers, w)
	}
	env.logf("draining with %d worker(s) × %d slots, pool of %d connections", f.Workers, f.Concurrency, f.MaxConns)
	// The workers outlive a signal: it ends the run, and the deferred stop
	// shuts them down gracefully.
	defer func() { _ = stopWorkers(workers) }()
	stopProfile, err := startCPUProfile(f.CPUProfile)
	if err != nil {
		return err
	}
	defer func() { _ = stopProfile() }()
	timing, err := env.awaitDrain(ctx, func() error {
		for _, w := range workers {
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		return nil
	}, f.DrainPoll, f.Timeout, f.Tasks)
	if err != nil {
		return err
	}
	if err := stopProfile(); err != nil {
		return err
	}
	if err := writeAllocProfile(f.MemProfile); err != nil {
		return err
	}
	if err := stopWorkers(workers); err != nil {
		return errors.Wrap(err, "stop workers")
	}
	if err := env.logMetrics(reg); err != nil {
		return err
	}
	res, err := env.result(ctx, f.Tasks, steps, insert, timing)
	if err != nil {
		return err
	}
	params := f.drainParams(steps)
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, drainReport{benchHeader: env.header, Params: params, drainResult: res})
	}
	w := newTable(env.cfg.Stdout)
	unit := "tasks"
	if mode == "workflow" {
		unit = "workflows"
	}
	fmt.Fprintf(w, "mode:\t%s: %d %s of %d no-op step(s); %d worker(s) × %d slots, pool of %d\n",
		mode, f.Tasks, unit, steps, f.Workers, f.Concurrency, f.MaxConns)
	printDrain(w, unit, params, res)
	printBenchEnv(w, env.header)
	return w.Flush()
}

// startCPUProfile starts a Go CPU profile into path, if path is set, and
// returns the function that ends it; that function is idempotent.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "--cpuprofile"), ErrConfig)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		_ = file.Close()
		return nil, errors.Wrap(err, "start CPU profile")
	}
	var once sync.Once
	var closeErr error
	return func() error {
		once.Do(func() {
			pprof.StopCPUProfile()
			closeErr = errors.Wrap(file.Close(), "write CPU profile")
		})
		return closeErr
	}, nil
}

// writeAllocProfile writes the allocations of the whole run so far (insert
// and drain; pprof tells them apart by stack) to path, if path is set.
func writeAllocProfile(path string) error {
	if path == "" {
		return nil
	}
	file, err := os.Create(path)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--memprofile"), ErrConfig)
	}
	if err := pprof.Lookup("allocs").WriteTo(file, 0); err != nil {
		_ = file.Close()
		return errors.Wrap(err, "write allocation profile")
	}
	return errors.Wrap(file.Close(), "write allocation profile")
}

// printDrain writes one drain's figures as table rows.
func printDrain(w io.Writer, unit string, p drainParams, r drainResult) {
	fmt.Fprintf(w, "insert:\t%.0f %s/s\t%d in %.2f s (Client.StartMany, batches of %d)\n",
		r.InsertPerSecond, unit, p.Tasks, r.InsertSeconds, p.InsertBatch)
	if r.Counted {
		fmt.Fprintf(w, "drain:\t%.0f %s/s\t%d in %.3f s (worker start → done notifications named all; one poll confirmed)\n",
			r.DrainPerSecond, unit, p.Tasks, r.DrainSeconds)
	} else {
		fmt.Fprintf(w, "drain:\t%.0f %s/s\t%d in %.3f s (worker start → poll saw all completed; poll every %.0f ms, %.1f ms per poll)\n",
			r.DrainPerSecond, unit, p.Tasks, r.DrainSeconds, p.DrainPollMs, r.PollQueryMsAvg)
	}
	if p.StepsPerTask > 1 {
		fmt.Fprintf(w, "steps:\t%.0f steps/s\t%d steps\n", r.StepsPerSecond, p.Tasks*p.StepsPerTask)
	}
	fmt.Fprintf(w, "last completion:\t%.3f s\tafter worker start (finished_at; no poll granularity)\n", r.LastCompletionSeconds)
	fmt.Fprintf(w, "events:\t%.0f events/s\t%d written, %.1f per %s\n", r.DrainEventsPerSecond, r.EventsWritten, r.EventsPerTask, strings.TrimSuffix(unit, "s"))
}

// paddedInput is the bench workflow's input for steps steps, padded to
// about n bytes of JSON when n is larger than the bare input.
func paddedInput(steps, n int) benchInput {
	in := benchInput{Steps: steps}
	const overhead = len(`{"steps":0,"pad":""}`)
	if pad := n - overhead; pad > 0 {
		in.Pad = strings.Repeat("x", pad)
	}
	return in
}
