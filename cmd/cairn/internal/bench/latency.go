package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// latency: an open-loop producer starts tasks at a fixed rate against idle
// workers; each task is timed from the Start call to its first step's start
// (in-process) and to the return of Client.Wait.

const (
	// latencyWarmup tasks run one at a time before each sub-run and are
	// not counted: they take the first-use costs (connections, plans).
	latencyWarmup = 10
	// latencyMaxInflight bounds the producer's goroutines. A task due while
	// this many are in flight is dropped and counted, rather than started
	// late, which would hide the queueing it measures.
	latencyMaxInflight = 10_000
	// latencyWaitTimeout bounds how long one task is waited for.
	latencyWaitTimeout = time.Minute
)

// latencySteps are the sub-runs: 1-step tasks, then 3-step workflows.
var latencySteps = []int{1, 3}

type latencyPercentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func newLatencyPercentiles(ds []time.Duration) latencyPercentiles {
	slices.Sort(ds)
	p := latencyPercentiles{Count: len(ds)}
	if len(ds) == 0 {
		return p
	}
	p.P50, p.P90, p.P99 = percentileMillis(ds, 0.50), percentileMillis(ds, 0.90), percentileMillis(ds, 0.99)
	p.Max = ms(ds[len(ds)-1])
	return p
}

// percentileMillis is the p-th percentile of sorted in milliseconds, by
// the nearest-rank method (as the demo's summary).
func percentileMillis(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func (p latencyPercentiles) String() string {
	return fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", p.P50, p.P90, p.P99, p.Max)
}

// latencyRun is one sub-run's figures.
type latencyRun struct {
	Steps    int `json:"steps"`
	Tasks    int `json:"tasks"`
	Finished int `json:"finished"`
	// Dropped counts tasks not started because latencyMaxInflight were
	// in flight: the system did not keep up with the rate.
	Dropped      int     `json:"dropped"`
	AchievedRate float64 `json:"achieved_rate_per_second"`
	// ScheduleToAccepted: Start called → Start returns the task's id, its
	// task durable (the part of ScheduleToStart the caller waits for).
	ScheduleToAccepted latencyPercentiles `json:"schedule_to_accepted"`
	// ScheduleToStart: Start called → first step begins (in-process clock).
	ScheduleToStart latencyPercentiles `json:"schedule_to_start"`
	// ScheduleToCompleted: Start called → Client.Wait returns, including
	// however Wait learns of the end (notification or poll).
	ScheduleToCompleted latencyPercentiles `json:"schedule_to_completed"`
	// ScheduleToRecorded: created_at → finished_at as recorded in the
	// task (writer's clock, same host): completion as recorded, without
	// the time Wait takes to learn of it.
	ScheduleToRecorded latencyPercentiles `json:"schedule_to_recorded"`
}

type latencyParams struct {
	Rate            int     `json:"rate_per_second"`
	DurationSeconds float64 `json:"duration_seconds"`
	Workers         int     `json:"workers"`
	Concurrency     int     `json:"concurrency"`
	MaxConns        int     `json:"max_conns"`
	WarmupTasks     int     `json:"warmup_tasks"`
	WorkerPollMs    float64 `json:"worker_poll_interval_ms"`
}

type latencyReport struct {
	benchHeader
	Params latencyParams `json:"params"`
	Runs   []latencyRun  `json:"runs"`
}

// Latency starts p.Workers in-process workers, then runs two sub-runs,
// 1-step tasks and 3-step workflows: an open-loop producer calls
// Client.StartDynamic p.Rate times a second for p.Duration, and each task is timed
// from its Start call to its first step's start and to the return of
// Client.Wait.
func Latency(ctx context.Context, cfg Config, p Params) error {
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if f.Duration < time.Second {
		return errmark.Mark(errors.Newf("--duration %s: use 1s to 1h", f.Duration), ErrConfig)
	}
	if err := positive(
		intFlag{"rate", f.Rate},
		intFlag{"workers", f.Workers},
		intFlag{"concurrency", f.Concurrency},
		intFlag{"max-conns", f.MaxConns},
	); err != nil {
		return err
	}
	env, closeEnv, err := openBench(ctx, cfg, "latency")
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	workers0, closeWorkers, err := env.target(ctx, f.MaxConns)
	if err != nil {
		return err
	}
	defer closeWorkers()
	// On PostgreSQL the producer and its waiters get their own pool, so
	// their polling does not queue behind the workers' connections (the
	// embedded store is one store for both).
	clients, closeClients, err := env.target(ctx, f.MaxConns)
	if err != nil {
		return err
	}
	defer closeClients()
	client, err := sdk.NewClient(clients.clientConfig(env.cfg))
	if err != nil {
		return err
	}
	defer client.Close()
	starts := &stepStarts{first: map[string]time.Time{}}
	workers := make([]*sdk.Worker, 0, f.Workers)
	for range f.Workers {
		w, err := newBenchWorkerWithMetrics(workers0, &env.cfg, f.Concurrency, starts.record, nil, 0)
		if err != nil {
			return err
		}
		workers = append(workers, w)
	}
	defer func() { _ = stopWorkers(workers) }()
	for _, w := range workers {
		if err := w.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	var runs []latencyRun
	for _, steps := range latencySteps {
		env.logf("latency: %d-step tasks at %d/s for %s", steps, f.Rate, f.Duration)
		run, err := latencySubRun(ctx, client, starts, steps, f.Rate, f.Duration)
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	if err := stopWorkers(workers); err != nil {
		return errors.Wrap(err, "stop workers")
	}
	params := latencyParams{Rate: f.Rate, DurationSeconds: f.Duration.Seconds(), Workers: f.Workers,
		Concurrency: f.Concurrency, MaxConns: f.MaxConns, WarmupTasks: latencyWarmup, WorkerPollMs: ms(benchWorkerPollInterval)}
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, latencyReport{benchHeader: env.header, Params: params, Runs: runs})
	}
	w := newTable(env.cfg.Stdout)
	pools := fmt.Sprintf("pools of %d", f.MaxConns)
	if env.lite != nil {
		pools = "the embedded store"
	}
	fmt.Fprintf(w, "mode:\tlatency: open-loop producer at %d tasks/s for %s per sub-run; %d worker(s) × %d slots, %s\n",
		f.Rate, f.Duration, f.Workers, f.Concurrency, pools)
	fmt.Fprintf(w, "figures:\tp50 / p90 / p99 / max in ms; accepted = until Start returns the id; completed = until Client.Wait returns; recorded = created_at → finished_at in the task row\n")
	printBenchEnv(w, env.header)
	fmt.Fprintf(w, "\nRUN\tTASKS\tACHIEVED/S\tSCHEDULE→ACCEPTED\tSCHEDULE→START\tSCHEDULE→COMPLETED\tSCHEDULE→RECORDED\n")
	for _, r := range runs {
		name := fmt.Sprintf("%d-step", r.Steps)
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\n", name, r.Tasks, r.AchievedRate,
			r.ScheduleToAccepted, r.ScheduleToStart, r.ScheduleToCompleted, r.ScheduleToRecorded)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range runs {
		if r.Dropped > 0 || r.Finished < r.Tasks {
			fmt.Fprintf(env.cfg.Stdout, "\n%d-step: %d tasks dropped (too many in flight), %d of %d finished\n",
				r.Steps, r.Dropped, r.Finished, r.Tasks)
		}
	}
	return nil
}

// stepStarts records when each task's first step began.
type stepStarts struct {
	mu    sync.Mutex
	first map[string]time.Time // task id → first step's start; written by step callbacks, read after a sub-run
}

// record is the bench workflow's step hook.
func (s *stepStarts) record(ctx context.Context) {
	now := time.Now()
	info, ok := activities.GetInfo(ctx)
	if !ok || info.Position != 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.first[info.TaskID]; !seen {
		s.first[info.TaskID] = now
	}
}

func (s *stepStarts) get(id uuid.UUID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.first[id.String()]
	return t, ok
}

// latencySample is one task of a sub-run.
type latencySample struct {
	called, accepted, done time.Time
	id                     uuid.UUID
	info                   *sdk.TaskInfo
	err                    error
}

func latencySubRun(ctx context.Context, client *sdk.Client, starts *stepStarts, steps, rate int, duration time.Duration) (latencyRun, error) {
	input, err := json.Marshal(benchInput{Steps: steps})
	if err != nil {
		return latencyRun{}, errors.Wrap(err, "encode bench input")
	}
	wf := sdk.TypeRef{Name: benchNoopType, Version: 1}
	one := func(ctx context.Context, s *latencySample) {
		s.called = time.Now()
		res, err := client.StartDynamic(ctx, wf, json.RawMessage(input), nil)
		if err != nil {
			s.err = err
			return
		}
		s.id, s.accepted = res.ID, time.Now()
		wctx, cancel := context.WithTimeout(ctx, latencyWaitTimeout)
		defer cancel()
		s.info, s.err = client.Wait(wctx, res.ID)
		s.done = time.Now()
	}
	for range latencyWarmup {
		var s latencySample
		one(ctx, &s)
		if s.err != nil {
			return latencyRun{}, errors.Wrap(s.err, "warm-up task")
		}
	}

	n := int(int64(rate) * int64(duration) / int64(time.Second))
	interval := time.Second / time.Duration(rate)
	samples := make([]latencySample, n)
	sem := make(chan struct{}, latencyMaxInflight)
	var wg sync.WaitGroup
	dropped := 0
	begin := time.Now()
	for i := range samples {
		// Open loop: task i is due at begin + i×interval, whatever the
		// earlier ones are doing.
		if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return latencyRun{}, ctx.Err()
			case <-time.After(d):
			}
		}
		select {
		case sem <- struct{}{}:
		default:
			dropped++
			continue
		}
		wg.Add(1)
		go func(s *latencySample) {
			defer wg.Done()
			defer func() { <-sem }()
			one(ctx, s)
		}(&samples[i])
	}
	produced := time.Since(begin) + interval
	wg.Wait()

	run := latencyRun{Steps: steps, Tasks: n - dropped, Dropped: dropped, AchievedRate: perSecond(int64(n-dropped), produced)}
	var toAccepted, toStart, toDone, toRecorded []time.Duration
	for _, s := range samples {
		if s.called.IsZero() {
			continue // dropped
		}
		if s.err != nil {
			return run, errors.Wrapf(s.err, "%d-step task %s", steps, s.id)
		}
		if s.info.Status != history.StatusCompleted {
			return run, errors.Newf("%d-step task %s ended %s", steps, s.id, s.info.Status)
		}
		run.Finished++
		toAccepted = append(toAccepted, s.accepted.Sub(s.called))
		if t, ok := starts.get(s.id); ok {
			toStart = append(toStart, t.Sub(s.called))
		}
		toDone = append(toDone, s.done.Sub(s.called))
		if s.info.FinishedAt != nil {
			toRecorded = append(toRecorded, s.info.FinishedAt.Sub(s.info.CreatedAt))
		}
	}
	run.ScheduleToAccepted = newLatencyPercentiles(toAccepted)
	run.ScheduleToStart = newLatencyPercentiles(toStart)
	run.ScheduleToCompleted = newLatencyPercentiles(toDone)
	run.ScheduleToRecorded = newLatencyPercentiles(toRecorded)
	return run, nil
}
