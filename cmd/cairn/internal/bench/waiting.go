package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// waiting: what tasks that wait for a signal cost the database while
// nothing happens. For each size of --waiting it starts that many tasks
// whose workflow receives a signal with a long timeout, lets one worker
// park them all (each attempt ends with wait_started; no slot is held),
// vacuums the tables as autovacuum would, and then reads PostgreSQL's
// statistics before and after a window in which only that idle worker
// runs. The reads an idle worker causes should not depend on how many
// tasks wait.

const (
	benchWaitType = "bench.wait"
	// benchWaitSignal is the signal the waiting tasks receive (never sent).
	benchWaitSignal = "go"
	// benchWaitTimeout is the receive's timeout: a person's approval,
	// longer than any run of the bench.
	benchWaitTimeout = 30 * 24 * time.Hour
	// waitingSettle is how long the bench waits after parking and vacuum
	// before its first reading: backends send their statistics when idle
	// within 10 s (PostgreSQL's PGSTAT_IDLE_INTERVAL), so the work of
	// parking is counted before the window opens.
	waitingSettle = 12 * time.Second
)

// newWaitWorkflow returns the workflow of the waiting mode: one receive.
func newWaitWorkflow() *sdk.Workflow[struct{}, bool] {
	return sdk.NewWorkflow(benchWaitType, 1, func(ctx workflow.Context, _ struct{}) (bool, error) {
		_, ok, err := workflow.Receive[json.RawMessage](ctx, benchWaitSignal, benchWaitTimeout)
		return ok, err
	}, nil)
}

// waitingRow is one size's window.
type waitingRow struct {
	Waiting       int     `json:"waiting"`
	ParkSeconds   float64 `json:"park_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	// RowsReadPerSecond is rows read by sequential scans plus index
	// entries read by index scans of the bench's tables, a second;
	// HeapFetchesPerSecond the heap rows index scans fetched.
	RowsReadPerSecond    float64 `json:"rows_read_per_second"`
	HeapFetchesPerSecond float64 `json:"heap_fetches_per_second"`
	ScansPerSecond       float64 `json:"scans_per_second"`
	// BuffersPerSecond is the pages of the bench's tables and indexes
	// read (from shared buffers or not) a second: unlike rows, it counts
	// the index entries a scan walks past without returning them.
	BuffersPerSecond float64 `json:"buffers_per_second"`
	// The database's counters (every schema, the bench's readings too).
	TransactionsPerSecond float64 `json:"transactions_per_second"`
	TupReturnedPerSecond  float64 `json:"tup_returned_per_second"`
	// ByRelation is what was read in the window per table (sequential
	// scans) and index, most buffers first.
	ByRelation []relationReads `json:"by_relation"`
}

type relationReads struct {
	Relation string `json:"relation"`
	Scans    int64  `json:"scans"`
	Read     int64  `json:"read"`
	Buffers  int64  `json:"buffers"`
}

type waitingReport struct {
	benchHeader
	Params struct {
		Waiting       []int   `json:"waiting"`
		WindowSeconds float64 `json:"window_seconds"`
		Vacuum        bool    `json:"vacuum"`
		Concurrency   int     `json:"concurrency"`
	} `json:"params"`
	Rows []waitingRow `json:"rows"`
	// Ratio and BufferRatio are the largest size's rows read and buffers
	// read a second over the smallest's: 1 is reads independent of the
	// waiting set.
	Ratio       float64 `json:"ratio"`
	BufferRatio float64 `json:"buffer_ratio"`
}

// Waiting measures the idle reads of waiting sets of p.Waiting tasks, each
// over p.Window (PostgreSQL only: it reads PostgreSQL's statistics).
func Waiting(ctx context.Context, cfg Config, p Params, vacuum bool) error {
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return errmark.Mark(errors.New("waiting reads PostgreSQL's statistics: set --database-url"), ErrConfig)
	}
	if f.Window < time.Second || f.Window > time.Hour {
		return errmark.Mark(errors.Newf("--window %s: use 1s to 1h", f.Window), ErrConfig)
	}
	if err := positive(intFlag{"waiting", len(f.Waiting)}, intFlag{"batch", f.Batch}, intFlag{"concurrency", f.Concurrency}, intFlag{"max-conns", f.MaxConns}); err != nil {
		return err
	}
	for _, n := range f.Waiting {
		if n < 1 || n > 10_000_000 {
			return errmark.Mark(errors.Newf("--waiting %d: use 1 to 10000000 tasks", n), ErrConfig)
		}
	}
	env, closeEnv, err := openBench(ctx, cfg, "waiting")
	if err != nil {
		return err
	}
	defer closeEnv()
	report := waitingReport{benchHeader: env.header}
	report.Params.Waiting, report.Params.WindowSeconds, report.Params.Concurrency, report.Params.Vacuum = f.Waiting, f.Window.Seconds(), f.Concurrency, vacuum
	for _, n := range f.Waiting {
		row, err := waitingRun(ctx, env, f, n, vacuum)
		if err != nil {
			return errors.Wrapf(err, "waiting %d", n)
		}
		env.logf("waiting %d: %.0f rows read/s, %.1f transactions/s", n, row.RowsReadPerSecond, row.TransactionsPerSecond)
		report.Rows = append(report.Rows, row)
	}
	report.Ratio = waitingRatio(report.Rows, func(r waitingRow) float64 { return r.RowsReadPerSecond })
	report.BufferRatio = waitingRatio(report.Rows, func(r waitingRow) float64 { return r.BuffersPerSecond })
	if env.cfg.JSON {
		return printJSON(env.cfg.Stdout, report)
	}
	w := newTable(env.cfg.Stdout)
	fmt.Fprintf(w, "mode:\twaiting: tasks parked in a receive, one idle worker, PostgreSQL's reads over %s\n", f.Window)
	fmt.Fprintf(w, "waiting\tpark (s)\trows read/s\tbuffers/s\theap fetches/s\tscans/s\txact/s (db)\ttup_returned/s (db)\tmost buffers in the window (buffers/rows)\n")
	for _, r := range report.Rows {
		top := ""
		for i, rel := range r.ByRelation {
			if i == 3 || rel.Buffers == 0 {
				break
			}
			top += fmt.Sprintf("%s %d/%d; ", rel.Relation, rel.Buffers, rel.Read)
		}
		fmt.Fprintf(w, "%d\t%.1f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%s\n", r.Waiting, r.ParkSeconds, r.RowsReadPerSecond,
			r.BuffersPerSecond, r.HeapFetchesPerSecond, r.ScansPerSecond, r.TransactionsPerSecond, r.TupReturnedPerSecond, top)
	}
	fmt.Fprintf(w, "ratio:\tlargest waiting set over the smallest: rows read/s %.2f, buffers/s %.2f\n", report.Ratio, report.BufferRatio)
	printBenchEnv(w, env.header)
	return w.Flush()
}

// waitingRatio is the largest set's figure over the smallest's.
func waitingRatio(rows []waitingRow, figure func(waitingRow) float64) float64 {
	if len(rows) < 2 {
		return 1
	}
	small := slices.MinFunc(rows, func(a, b waitingRow) int { return cmp.Compare(a.Waiting, b.Waiting) })
	large := slices.MaxFunc(rows, func(a, b waitingRow) int { return cmp.Compare(a.Waiting, b.Waiting) })
	if figure(small) == 0 {
		return 0
	}
	return figure(large) / figure(small)
}

// waitingRun parks n tasks and measures one window.
func waitingRun(ctx context.Context, env *benchEnv, f *Params, n int, vacuum bool) (waitingRow, error) {
	row := waitingRow{Waiting: n}
	if err := env.reset(ctx); err != nil {
		return row, err
	}
	target, closeTarget, err := env.target(ctx, f.MaxConns)
	if err != nil {
		return row, err
	}
	defer closeTarget()
	client, err := sdk.NewClient(target.clientConfig(env.cfg))
	if err != nil {
		return row, err
	}
	defer client.Close()
	began := time.Now()
	wf := newWaitWorkflow()
	for done := 0; done < n; {
		k := min(f.Batch, n-done)
		starts := make([]sdk.StartParams, k)
		for i := range starts {
			starts[i] = sdk.StartEntry(wf, struct{}{}, nil)
		}
		if _, err := client.StartMany(ctx, starts); err != nil {
			return row, errors.Wrapf(err, "start tasks %d to %d", done+1, done+k)
		}
		done += k
	}
	// Statistics of the backlog, as autovacuum takes them after a burst of
	// starts: the worker's claim plans with them.
	if err := env.obs.analyze(ctx); err != nil {
		return row, err
	}
	// One worker with the defaults a service has (poll, rescuer, lease),
	// but room to park the backlog quickly.
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Pool: target.pool, Schema: env.cfg.Schema, ListenURL: env.cfg.ListenURL, Namespace: env.cfg.Namespace,
		Concurrency: f.Concurrency, Keys: env.cfg.Keys,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return row, err
	}
	if err := sdk.RegisterSafely(w, wf); err != nil {
		return row, err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return row, err
	}
	defer func() { _ = stopWorkers([]*sdk.Worker{w}) }()
	if err := env.obs.awaitParked(ctx, n); err != nil {
		return row, err
	}
	row.ParkSeconds = time.Since(began).Seconds()
	if vacuum {
		if _, err := env.obs.pool.Exec(ctx, env.obs.q("TablesVacuum")); err != nil {
			return row, errors.Wrap(err, "vacuum the bench tables")
		}
	}
	env.logf("waiting %d: parked in %.1f s; settling %s, then reading for %s", n, row.ParkSeconds, waitingSettle, f.Window)
	if err := sleepCtx(ctx, waitingSettle); err != nil {
		return row, err
	}
	before, err := env.obs.readStats(ctx)
	if err != nil {
		return row, err
	}
	if err := sleepCtx(ctx, f.Window); err != nil {
		return row, err
	}
	after, err := env.obs.readStats(ctx)
	if err != nil {
		return row, err
	}
	window := after.at.Sub(before.at)
	row.WindowSeconds = window.Seconds()
	var read, fetched, scans, buffers int64
	for name, a := range after.relations {
		b := before.relations[name]
		d := relationReads{Relation: name, Scans: a.scans - b.scans, Read: a.read - b.read, Buffers: a.buffers - b.buffers}
		read, fetched, scans, buffers = read+d.Read, fetched+a.fetched-b.fetched, scans+d.Scans, buffers+d.Buffers
		row.ByRelation = append(row.ByRelation, d)
	}
	slices.SortFunc(row.ByRelation, func(a, b relationReads) int {
		return cmp.Or(cmp.Compare(b.Buffers, a.Buffers), cmp.Compare(b.Read, a.Read), cmp.Compare(a.Relation, b.Relation))
	})
	row.BuffersPerSecond = perSecond(buffers, window)
	row.RowsReadPerSecond = perSecond(read, window)
	row.HeapFetchesPerSecond = perSecond(fetched, window)
	row.ScansPerSecond = perSecond(scans, window)
	row.TransactionsPerSecond = perSecond(after.xacts-before.xacts, window)
	row.TupReturnedPerSecond = perSecond(after.returned-before.returned, window)
	return row, nil
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// awaitParked waits until n tasks wait in their receive, at most ten
// minutes.
func (b *benchSQL) awaitParked(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		var waiting, unfinished int
		if err := b.pool.QueryRow(ctx, b.q("TaskWaitingCount")).Scan(&waiting, &unfinished); err != nil {
			return errors.Wrap(err, "count waiting tasks")
		}
		if waiting == n && unfinished == n {
			return nil
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return errors.Wrapf(err, "%d of %d tasks waiting", waiting, n)
		}
	}
}

// relationStats are one relation's cumulative counters.
type relationStats struct{ scans, read, fetched, buffers int64 }

// statsReading is one reading of PostgreSQL's statistics.
type statsReading struct {
	at                       time.Time
	relations                map[string]relationStats
	xacts, returned, fetched int64
}

// readStats reads the bench schema's relation counters and the database's.
func (b *benchSQL) readStats(ctx context.Context) (statsReading, error) {
	r := statsReading{at: time.Now(), relations: map[string]relationStats{}}
	rows, err := b.pool.Query(ctx, b.q("StatReads"), pgx.NamedArgs{"schema": b.schema})
	if err != nil {
		return r, errors.Wrap(err, "read table statistics")
	}
	for rows.Next() {
		var name string
		var s relationStats
		if err := rows.Scan(&name, &s.scans, &s.read, &s.fetched, &s.buffers); err != nil {
			rows.Close()
			return r, errors.Wrap(err, "read table statistics")
		}
		r.relations[name] = s
	}
	if err := rows.Err(); err != nil {
		return r, errors.Wrap(err, "read table statistics")
	}
	err = b.pool.QueryRow(ctx, b.q("StatDatabase")).Scan(&r.xacts, &r.returned, &r.fetched)
	return r, errors.Wrap(err, "read database statistics")
}
