package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// steady: a producer starts keyed one-step tasks at a fixed rate for a
// while, workers run them, and their leader's retention removes them a
// few seconds after they finish, so the tables reach a steady state. The
// tables' sizes (with their indexes and TOAST) and live rows are sampled:
// with retention and vacuum keeping up, they plateau.

// steadyKeyRetention is how long removed tasks' keys stay retired in the
// steady run: short, so retired keys reach their own steady state too.
const steadyKeyRetention = time.Second

// steadySample is one reading of the tables.
type steadySample struct {
	AtSeconds float64          `json:"at_seconds"`
	Started   int              `json:"started"`
	Rows      map[string]int64 `json:"rows"`
	DeadRows  map[string]int64 `json:"dead_rows"`
	Bytes     map[string]int64 `json:"bytes"`
	Total     int64            `json:"total_bytes"`
	// Unfinished is how many tasks were pending, retrying or running;
	// FinishedPerSecond how many finished a second since the sample
	// before (started minus unfinished, over the time between).
	Unfinished        int64   `json:"unfinished"`
	FinishedPerSecond float64 `json:"finished_per_second"`
	// Holding says that the --hold-xmin snapshot was open when the
	// sample was read.
	Holding bool `json:"holding,omitempty"`
}

type steadyParams struct {
	Rate             int     `json:"rate"`
	DurationSeconds  float64 `json:"duration_seconds"`
	RetentionSeconds float64 `json:"retention_seconds"`
	KeyRetentionSecs float64 `json:"key_retention_seconds"`
	Vacuum           bool    `json:"vacuum"`
	Workers          int     `json:"workers"`
	Concurrency      int     `json:"concurrency"`
	HoldXminSeconds  float64 `json:"hold_xmin_seconds,omitempty"`
}

// steadyPhase sums the samples of a part of a --hold-xmin run: before the
// snapshot was taken, while it was held, after it was let go.
type steadyPhase struct {
	Name              string  `json:"name"`
	Samples           int     `json:"samples"`
	FinishedPerSecond float64 `json:"finished_per_second"`
	MaxUnfinished     int64   `json:"max_unfinished"`
	MaxDeadTasks      int64   `json:"max_dead_tasks"`
	MaxTotalBytes     int64   `json:"max_total_bytes"`
}

type steadyReport struct {
	benchHeader
	Params  steadyParams   `json:"params"`
	Samples []steadySample `json:"samples"`
	// PlateauRatio is the largest total size over the smallest in the
	// last half of the run: 1 is flat.
	PlateauRatio float64 `json:"plateau_ratio"`
	// Phases (with --hold-xmin) and HoldRatio, the finish rate while the
	// snapshot was held over the rate before.
	Phases    []steadyPhase `json:"phases,omitempty"`
	HoldRatio float64       `json:"hold_ratio,omitempty"`
}

// steadySamples is how many times a steady run reads the tables.
const steadySamples = 24

// steadyTables are the tables sampled: what a task leaves behind.
var steadyTables = []string{"tasks", "events", "retired_keys", "blobs", "stream_entries"}

// Steady runs the steady-state measurement (PostgreSQL only: it reads
// pg_total_relation_size).
func Steady(ctx context.Context, cfg Config, p Params, vacuum bool) error {
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return errmark.Mark(errors.New("steady reads PostgreSQL's table sizes: set --database-url"), ErrConfig)
	}
	if f.Duration < 10*time.Second || f.Retention < 0 || f.Retention > f.Duration/3 {
		return errmark.Mark(errors.Newf("--duration %s and --retention %s: use a duration of 10s or more and a retention of at most a third of it, so the run reaches its steady state (0: none, and the tables grow)", f.Duration, f.Retention), ErrConfig)
	}
	if err := positive(intFlag{"rate", f.Rate}, intFlag{"workers", f.Workers}, intFlag{"concurrency", f.Concurrency}, intFlag{"max-conns", f.MaxConns}); err != nil {
		return err
	}
	if f.HoldXmin < 0 || f.HoldXmin > 0 && f.Duration-f.HoldXmin < 6*f.Duration/steadySamples {
		return errmark.Mark(errors.Newf("--hold-xmin %s: use 0 (none) or a hold that leaves at least three samples (%s) of the %s run before and after it",
			f.HoldXmin, 3*f.Duration/steadySamples, f.Duration), ErrConfig)
	}
	env, closeEnv, err := openBench(ctx, cfg, "steady")
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	target, closeTarget, err := env.target(ctx, f.MaxConns)
	if err != nil {
		return err
	}
	defer closeTarget()
	client, err := sdk.NewClient(target.clientConfig(env.cfg))
	if err != nil {
		return err
	}
	defer client.Close()
	workers := make([]*sdk.Worker, 0, f.Workers)
	for range f.Workers {
		w, err := sdk.NewWorker(sdk.WorkerConfig{
			Pool: target.pool, Schema: env.cfg.Schema, ListenURL: env.cfg.ListenURL, Namespace: env.cfg.Namespace, Concurrency: f.Concurrency,
			PollInterval: benchWorkerPollInterval, RescueInterval: time.Second,
			DefaultRetention: f.Retention, DefaultKeyRetention: steadyKeyRetention, Keys: env.cfg.Keys,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			return err
		}
		if err := sdk.RegisterSafely(w, newBenchWorkflow(nil)); err != nil {
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
	env.logf("steady: %d tasks/s for %s, retention %s, key retention %s, snapshot held %s", f.Rate, f.Duration, f.Retention, steadyKeyRetention, f.HoldXmin)
	samples, err := steadyRun(ctx, env, client, f.Rate, f.Duration, f.HoldXmin, vacuum)
	if err != nil {
		return err
	}
	if err := stopWorkers(workers); err != nil {
		return errors.Wrap(err, "stop workers")
	}
	report := steadyReport{benchHeader: env.header, Samples: samples, PlateauRatio: plateauRatio(samples),
		Params: steadyParams{Rate: f.Rate, DurationSeconds: f.Duration.Seconds(), RetentionSeconds: f.Retention.Seconds(),
			KeyRetentionSecs: steadyKeyRetention.Seconds(), Vacuum: vacuum, Workers: f.Workers, Concurrency: f.Concurrency,
			HoldXminSeconds: f.HoldXmin.Seconds()}}
	if f.HoldXmin > 0 {
		report.Phases, report.HoldRatio = holdPhases(samples)
	}
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, report)
	}
	w := newTable(env.cfg.Stdout)
	fmt.Fprintf(w, "mode:\tsteady: %d keyed 1-step tasks/s for %s; retention %s, key retention %s, vacuum %t\n",
		f.Rate, f.Duration, f.Retention, steadyKeyRetention, vacuum)
	fmt.Fprintf(w, "t (s)\tstarted\tfinished/s\tunfinished\ttasks\tdead tasks\tevents\tdead events\tretired keys\ttasks MB\tevents MB\tretired MB\ttotal MB\tsnapshot held\n")
	for _, s := range samples {
		fmt.Fprintf(w, "%.0f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%t\n", s.AtSeconds, s.Started,
			s.FinishedPerSecond, s.Unfinished, s.Rows["tasks"], s.DeadRows["tasks"], s.Rows["events"], s.DeadRows["events"], s.Rows["retired_keys"],
			mb(s.Bytes["tasks"]), mb(s.Bytes["events"]), mb(s.Bytes["retired_keys"]), mb(s.Total), s.Holding)
	}
	fmt.Fprintf(w, "plateau:\tlargest / smallest total size over the last half: %.2f\n", report.PlateauRatio)
	for _, ph := range report.Phases {
		fmt.Fprintf(w, "%s:\t%.0f finished/s over %d samples; at most %d unfinished, %d dead task rows, %.2f MB\n",
			ph.Name, ph.FinishedPerSecond, ph.Samples, ph.MaxUnfinished, ph.MaxDeadTasks, mb(ph.MaxTotalBytes))
	}
	if report.HoldRatio > 0 {
		fmt.Fprintf(w, "hold ratio:\tfinished/s while the snapshot was held over before it: %.2f\n", report.HoldRatio)
	}
	return w.Flush()
}

// steadyRun produces at rate for d while a sampler reads the tables
// steadySamples times (and, with vacuum, vacuums them first, as autovacuum
// would), and, with hold, a snapshot is held open for hold in the middle
// of the run.
func steadyRun(ctx context.Context, env *benchEnv, client *sdk.Client, rate int, d, hold time.Duration, vacuum bool) ([]steadySample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	var started atomic.Int64
	var holding atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	var samples []steadySample
	g.Go(func() error {
		var err error
		samples, err = sampleSteadily(gctx, env, begin, d, vacuum, &started, &holding)
		return err
	})
	if hold > 0 {
		g.Go(func() error { return holdSnapshot(gctx, env, begin.Add((d-hold)/2), hold, &holding) })
	}
	g.Go(func() error { return produceSteadily(gctx, client, begin, d, rate, &started) })
	err := g.Wait()
	return samples, err
}

// produceSteadily starts rate keyed one-step tasks a second, a tenth of
// a second's at a time, until d has passed since begin.
func produceSteadily(ctx context.Context, client *sdk.Client, begin time.Time, d time.Duration, rate int, started *atomic.Int64) error {
	const tick = 100 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for n := 0; time.Since(begin) < d; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		starts := make([]sdk.StartParams, perTick)
		for i := range starts {
			starts[i] = sdk.StartParams{Workflow: sdk.TypeRef{Name: benchNoopType, Version: 1}, Input: benchInput{Steps: 1},
				Opts: sdk.StartOpts{IdempotencyKey: "steady-" + strconv.Itoa(n+i)}}
		}
		if _, err := client.StartMany(ctx, starts); err != nil {
			return errors.Wrap(err, "start")
		}
		n += perTick
		started.Store(int64(n))
	}
	return nil
}

// sampleSteadily reads the tables every d/steadySamples from begin until
// d has passed.
func sampleSteadily(ctx context.Context, env *benchEnv, begin time.Time, d time.Duration, vacuum bool, started *atomic.Int64, holding *atomic.Bool) ([]steadySample, error) {
	every := d / steadySamples
	var samples []steadySample
	prevAt, prevFinished := 0.0, int64(0)
	for next := begin.Add(every); !next.After(begin.Add(d)); next = next.Add(every) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(next)):
		}
		held, startedBefore := holding.Load(), int(started.Load())
		s, err := sampleTables(ctx, env, vacuum)
		if err != nil {
			return nil, err
		}
		at := time.Since(begin).Seconds()
		// Started is read before the unfinished tasks are counted, so a
		// task started in between is not taken for finished.
		s.AtSeconds, s.Started, s.Holding = math.Round(at), startedBefore, held || holding.Load()
		finished := int64(s.Started) - s.Unfinished
		s.FinishedPerSecond = float64(finished-prevFinished) / (at - prevAt)
		prevAt, prevFinished = at, finished
		samples = append(samples, s)
		env.logf("steady: %.0fs: %.0f finished/s, %d unfinished, %d dead task rows, %.2f MB%s", s.AtSeconds, s.FinishedPerSecond,
			s.Unfinished, s.DeadRows["tasks"], mb(s.Total), map[bool]string{true: ", snapshot held"}[s.Holding])
	}
	return samples, nil
}

// holdSnapshot opens a REPEATABLE READ transaction at from and reads in
// it, so its snapshot holds back the oldest xmin, until hold has passed.
func holdSnapshot(ctx context.Context, env *benchEnv, from time.Time, hold time.Duration, holding *atomic.Bool) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(time.Until(from)):
	}
	conn, err := env.obs.pool.Acquire(ctx)
	if err != nil {
		return errors.Wrap(err, "hold a snapshot")
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return errors.Wrap(err, "hold a snapshot")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	name := pgx.Identifier{env.cfg.Schema, "tasks"}.Sanitize()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+name+" LIMIT 1"); err != nil {
		return errors.Wrap(err, "hold a snapshot")
	}
	holding.Store(true)
	env.logf("steady: holding a snapshot for %s", hold)
	defer holding.Store(false)
	select {
	case <-ctx.Done():
	case <-time.After(hold):
		env.logf("steady: snapshot let go")
	}
	return nil
}

// sampleTables reads the sampled tables' live and dead rows and total
// sizes, and the unfinished tasks.
func sampleTables(ctx context.Context, env *benchEnv, vacuum bool) (steadySample, error) {
	s := steadySample{Rows: map[string]int64{}, DeadRows: map[string]int64{}, Bytes: map[string]int64{}}
	pool := env.obs.pool
	for _, table := range steadyTables {
		name := pgx.Identifier{env.cfg.Schema, table}.Sanitize()
		if vacuum {
			if _, err := pool.Exec(ctx, "VACUUM "+name); err != nil {
				return s, errors.Wrapf(err, "vacuum %s", table)
			}
		}
		// The statistics' counts (exact as of the VACUUM, when there is
		// one): counting the rows would read the tables whole at every
		// sample, beside the work measured.
		var rows, dead, size int64
		err := pool.QueryRow(ctx, `SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0), pg_total_relation_size($1::regclass)
			FROM (SELECT 1) AS one LEFT JOIN pg_stat_user_tables ON relid = $1::regclass`, name).Scan(&rows, &dead, &size)
		if err != nil {
			return s, errors.Wrapf(err, "size of %s", table)
		}
		s.Rows[table], s.DeadRows[table], s.Bytes[table] = rows, dead, size
		s.Total += size
	}
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{env.cfg.Schema, "tasks"}.Sanitize()+
		" WHERE status IN ('pending', 'retrying', 'running')").Scan(&s.Unfinished)
	return s, errors.Wrap(err, "count unfinished tasks")
}

// holdPhases sums the samples before, while and after the snapshot was
// held (the first sample, the run's warm-up, left out), and returns the
// finish rate while held over the rate before.
func holdPhases(samples []steadySample) ([]steadyPhase, float64) {
	phases := []steadyPhase{{Name: "before"}, {Name: "held"}, {Name: "after"}}
	i := 0
	for _, s := range samples[min(1, len(samples)):] {
		switch {
		case s.Holding:
			i = 1
		case i == 1:
			i = 2
		}
		ph := &phases[i]
		ph.FinishedPerSecond += s.FinishedPerSecond // a sum until divided below
		ph.Samples++
		ph.MaxUnfinished = max(ph.MaxUnfinished, s.Unfinished)
		ph.MaxDeadTasks = max(ph.MaxDeadTasks, s.DeadRows["tasks"])
		ph.MaxTotalBytes = max(ph.MaxTotalBytes, s.Total)
	}
	for i := range phases {
		if phases[i].Samples > 0 {
			phases[i].FinishedPerSecond /= float64(phases[i].Samples)
		}
	}
	if phases[0].FinishedPerSecond == 0 {
		return phases, 0
	}
	return phases, phases[1].FinishedPerSecond / phases[0].FinishedPerSecond
}

// plateauRatio is the largest total over the smallest in the samples'
// last half.
func plateauRatio(samples []steadySample) float64 {
	tail := samples[len(samples)/2:]
	if len(tail) == 0 {
		return 0
	}
	lo, hi := tail[0].Total, tail[0].Total
	for _, s := range tail {
		lo, hi = min(lo, s.Total), max(hi, s.Total)
	}
	if lo == 0 {
		return 0
	}
	return float64(hi) / float64(lo)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
