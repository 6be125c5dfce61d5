package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

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
	Bytes     map[string]int64 `json:"bytes"`
	Total     int64            `json:"total_bytes"`
}

type steadyParams struct {
	Rate             int     `json:"rate"`
	DurationSeconds  float64 `json:"duration_seconds"`
	RetentionSeconds float64 `json:"retention_seconds"`
	KeyRetentionSecs float64 `json:"key_retention_seconds"`
	Vacuum           bool    `json:"vacuum"`
	Workers          int     `json:"workers"`
	Concurrency      int     `json:"concurrency"`
}

type steadyReport struct {
	benchHeader
	Params  steadyParams   `json:"params"`
	Samples []steadySample `json:"samples"`
	// PlateauRatio is the largest total size over the smallest in the
	// last half of the run: 1 is flat.
	PlateauRatio float64 `json:"plateau_ratio"`
}

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
	if f.Duration < 10*time.Second || f.Retention <= 0 || f.Retention > f.Duration/3 {
		return errmark.Mark(errors.Newf("--duration %s and --retention %s: use a duration of 10s or more and a retention above 0 and at most a third of it, so the run reaches its steady state", f.Duration, f.Retention), ErrConfig)
	}
	if err := positive(intFlag{"rate", f.Rate}, intFlag{"workers", f.Workers}, intFlag{"concurrency", f.Concurrency}, intFlag{"max-conns", f.MaxConns}); err != nil {
		return err
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
	env.logf("steady: %d tasks/s for %s, retention %s, key retention %s", f.Rate, f.Duration, f.Retention, steadyKeyRetention)
	samples, err := steadyRun(ctx, env, client, f.Rate, f.Duration, vacuum)
	if err != nil {
		return err
	}
	if err := stopWorkers(workers); err != nil {
		return errors.Wrap(err, "stop workers")
	}
	report := steadyReport{benchHeader: env.header, Samples: samples, PlateauRatio: plateauRatio(samples),
		Params: steadyParams{Rate: f.Rate, DurationSeconds: f.Duration.Seconds(), RetentionSeconds: f.Retention.Seconds(),
			KeyRetentionSecs: steadyKeyRetention.Seconds(), Vacuum: vacuum, Workers: f.Workers, Concurrency: f.Concurrency}}
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, report)
	}
	w := newTable(env.cfg.Stdout)
	fmt.Fprintf(w, "mode:\tsteady: %d keyed 1-step tasks/s for %s; retention %s, key retention %s, vacuum %t\n",
		f.Rate, f.Duration, f.Retention, steadyKeyRetention, vacuum)
	fmt.Fprintf(w, "t (s)\tstarted\ttasks\tevents\tretired keys\ttasks MB\tevents MB\tretired MB\ttotal MB\n")
	for _, s := range samples {
		fmt.Fprintf(w, "%.0f\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", s.AtSeconds, s.Started,
			s.Rows["tasks"], s.Rows["events"], s.Rows["retired_keys"],
			mb(s.Bytes["tasks"]), mb(s.Bytes["events"]), mb(s.Bytes["retired_keys"]), mb(s.Total))
	}
	fmt.Fprintf(w, "plateau:\tlargest / smallest total size over the last half: %.2f\n", report.PlateauRatio)
	return w.Flush()
}

// steadyRun produces at rate for d, sampling the tables twelve times (and,
// with vacuum, vacuuming them first, as autovacuum would).
func steadyRun(ctx context.Context, env *benchEnv, client *sdk.Client, rate int, d time.Duration, vacuum bool) ([]steadySample, error) {
	const tick = 100 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	every := d / 12
	begin := time.Now()
	nextSample := begin.Add(every)
	var samples []steadySample
	started := 0
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for time.Since(begin) < d {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ticker.C:
		}
		starts := make([]sdk.StartParams, perTick)
		for i := range starts {
			starts[i] = sdk.StartParams{Workflow: sdk.TypeRef{Name: benchNoopType, Version: 1}, Input: benchInput{Steps: 1},
				Opts: sdk.StartOpts{IdempotencyKey: "steady-" + strconv.Itoa(started+i)}}
		}
		if _, err := client.StartMany(ctx, starts); err != nil {
			return nil, errors.Wrap(err, "start")
		}
		started += perTick
		if time.Now().After(nextSample) {
			s, err := sampleTables(ctx, env, vacuum)
			if err != nil {
				return nil, err
			}
			s.AtSeconds, s.Started = time.Since(begin).Round(time.Second).Seconds(), started
			samples = append(samples, s)
			env.logf("steady: %.0fs: %.2f MB", s.AtSeconds, mb(s.Total))
			nextSample = nextSample.Add(every)
		}
	}
	return samples, nil
}

// sampleTables reads the sampled tables' live rows and total sizes.
func sampleTables(ctx context.Context, env *benchEnv, vacuum bool) (steadySample, error) {
	s := steadySample{Rows: map[string]int64{}, Bytes: map[string]int64{}}
	pool := env.obs.pool
	for _, table := range steadyTables {
		name := pgx.Identifier{env.cfg.Schema, table}.Sanitize()
		if vacuum {
			if _, err := pool.Exec(ctx, "VACUUM "+name); err != nil {
				return s, errors.Wrapf(err, "vacuum %s", table)
			}
		}
		var rows, size int64
		err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+name+"), pg_total_relation_size($1::regclass)", name).Scan(&rows, &size)
		if err != nil {
			return s, errors.Wrapf(err, "size of %s", table)
		}
		s.Rows[table], s.Bytes[table] = rows, size
		s.Total += size
	}
	return s, nil
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
