// riverscale: River's side of `cairn bench scale`, for the comparison of
// issue 39 (drain and start latency as worker processes are added against
// one database). River's own programs have no multi-process mode.
//
// For each count in -processes it truncates river_job, inserts -n no-op jobs
// (InsertMany, batches of 5,000), spawns that many worker processes (this
// binary with -worker: a River client with -workers slots and a pool of
// -max-conns, FetchCooldown 2 ms and FetchPollInterval 20 ms as River's
// bench), starts them at once and polls every 10 ms until no job is left
// unfinished: drain rate = n / that time. Then, the processes idle and
// river_job vacuumed (as autovacuum would; -vacuum=false leaves it), it
// inserts one job at a time at -rate for -duration and reports the start
// latency (attempted_at − created_at, both the database's clock).
//
// It is a separate module so that cairn's own module does not depend on
// River. Run it from this folder:
//
//	go run . -db "postgres://postgres@127.0.0.1:5432/river?sslmode=disable" -processes 1,2,4,8
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "benchmark" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

const insertBatch = 5000

func main() {
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/river?sslmode=disable", "database url")
	processes := flag.String("processes", "1,2,4,8", "worker process counts, one drain each")
	n := flag.Int("n", 100000, "jobs drained per run")
	workers := flag.Int("workers", 2000, "MaxWorkers of each worker process (cairn bench scale's --concurrency)")
	maxConns := flag.Int("max-conns", 16, "pool size of each worker process (cairn bench scale's --max-conns)")
	rate := flag.Int("rate", 100, "jobs inserted per second for the start latency")
	duration := flag.Duration("duration", 10*time.Second, "how long each start-latency run inserts (0: none)")
	vacuum := flag.Bool("vacuum", true, "VACUUM (ANALYZE) river_job after each drain, before its start-latency run, as autovacuum would")
	worker := flag.Bool("worker", false, "run as a worker process (spawned by the parent)")
	flag.Parse()

	ctx := context.Background()
	if *worker {
		must(runWorker(ctx, *dbURL, *workers, *maxConns))
		return
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	must(err)
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	must(err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	must(err)
	fmt.Printf("%-10s %12s %10s %14s %s\n", "PROCESSES", "DRAIN S", "JOBS/S", "SPEEDUP", "START P50/P90/P99/MAX MS")
	var first float64
	for _, field := range strings.Split(*processes, ",") {
		procs, err := strconv.Atoi(strings.TrimSpace(field))
		must(err)
		drain, lat := runOnce(ctx, pool, procs, *n, *workers, *maxConns, *rate, *duration, *vacuum)
		perSec := float64(*n) / drain.Seconds()
		if first == 0 {
			first = perSec
		}
		fmt.Printf("%-10d %12.3f %10.0f %13.2f× %s\n", procs, drain.Seconds(), perSec, perSec/first, lat)
	}
}

func newClient(pool *pgxpool.Pool, maxWorkers int) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	cfg := &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workers:           workers,
	}
	if maxWorkers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}}
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// runOnce is one process count: the drain, then the start latency.
func runOnce(ctx context.Context, pool *pgxpool.Pool, procs, n, workers, maxConns, rate int, d time.Duration, vacuum bool) (time.Duration, string) {
	_, err := pool.Exec(ctx, "TRUNCATE river_job")
	must(err)
	_, err = pool.Exec(ctx, "VACUUM FULL river_job")
	must(err)
	inserter, err := newClient(pool, 0)
	must(err)
	for done := 0; done < n; {
		k := min(insertBatch, n-done)
		params := make([]river.InsertManyParams, k)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{Num: done + i}}
		}
		_, err := inserter.InsertMany(ctx, params)
		must(err)
		done += k
	}
	_, err = pool.Exec(ctx, "ANALYZE river_job")
	must(err)

	children := spawn(procs, workers, maxConns)
	defer children.stop()
	start := time.Now()
	for _, c := range children {
		_, err := io.WriteString(c.stdin, "start\n")
		must(err)
	}
	for {
		var left bool
		must(pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending'))`).Scan(&left))
		if !left {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	drain := time.Since(start)
	lat := "-"
	if d > 0 {
		if vacuum {
			_, err := pool.Exec(ctx, "VACUUM (ANALYZE) river_job")
			must(err)
		}
		lat = startLatency(ctx, pool, inserter, rate, d)
	}
	return drain, lat
}

func startLatency(ctx context.Context, pool *pgxpool.Pool, c *river.Client[pgx.Tx], rate int, d time.Duration) string {
	var (
		mu  sync.Mutex
		ids []int64
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for k := int(d.Seconds() * float64(rate)); k > 0; k-- {
		<-tick.C
		wg.Go(func() {
			res, err := c.Insert(ctx, noopArgs{}, nil)
			must(err)
			mu.Lock()
			ids = append(ids, res.Job.ID)
			mu.Unlock()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		var (
			unclaimed int
			pcts      []float64
			most      float64
		)
		must(pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempted_at IS NULL),
			coalesce(percentile_disc(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - created_at) * 1000)
				FILTER (WHERE attempted_at IS NOT NULL), ARRAY[0, 0, 0]::double precision[]),
			coalesce(max(extract(epoch FROM attempted_at - created_at) * 1000), 0)::double precision
			FROM river_job WHERE id = ANY($1)`, ids).Scan(&unclaimed, &pcts, &most))
		if unclaimed == 0 {
			return fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", pcts[0], pcts[1], pcts[2], most)
		}
		if time.Now().After(deadline) {
			must(fmt.Errorf("%d of %d jobs not attempted after a minute", unclaimed, len(ids)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type childList []*child

// spawn starts procs worker processes and waits until each says "ready".
func spawn(procs, workers, maxConns int) childList {
	exe, err := os.Executable()
	must(err)
	var out childList
	for range procs {
		cmd := exec.Command(exe, append(os.Args[1:], "-worker", "-workers", strconv.Itoa(workers), "-max-conns", strconv.Itoa(maxConns))...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		must(err)
		stdout, err := cmd.StdoutPipe()
		must(err)
		must(cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		must(err)
		if line != "ready\n" {
			must(fmt.Errorf("worker said %q", line))
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		out = append(out, &child{cmd: cmd, stdin: stdin})
	}
	return out
}

// stop closes every child's stdin (a graceful stop) and waits for it.
func (cs childList) stop() {
	for _, c := range cs {
		_ = c.stdin.Close()
	}
	for _, c := range cs {
		_ = c.cmd.Wait()
	}
}

// runWorker is a worker process: ready, a "start" line, then work until
// stdin closes.
func runWorker(ctx context.Context, dbURL string, workers, maxConns int) error {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	client, err := newClient(pool, workers)
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	line, err := in.ReadString('\n')
	if err != nil || line != "start\n" {
		return nil
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until the parent closes stdin
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverscale:", err)
		os.Exit(1)
	}
}
