package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// audit: the time of Client.Audit over a range of about a million events,
// with a selective filter the database can narrow by event type, the same
// filter with nothing for the database to narrow by, and no filter.
//
// The histories are written by SQL in bulk (generate_series), not through
// the engine: this measures reading them. The statements are in audit.sql.

const (
	// auditBenchTaskChunk tasks are written per statement.
	auditBenchTaskChunk = 25_000
	// auditBenchTaskSpacing separates the starts of consecutive tasks,
	// and auditBenchEventSpacing the events of one task: about a thousand
	// events a second, a task's events interleaved with its neighbours'.
	auditBenchTaskSpacing  = 10 * time.Millisecond
	auditBenchEventSpacing = 40 * time.Millisecond
	// Every auditBenchFailEvery-th task fails its first attempt with a
	// status from auditBenchStatuses (in turn) and succeeds on the second:
	// 12 events; the others take 10.
	auditBenchFailEvery = 5
)

// auditBenchCase is one timed audit.
type auditBenchCase struct {
	Name   string `json:"name"`
	Filter string `json:"filter"` // "" for none
}

var auditBenchCases = []auditBenchCase{
	{"selective, narrowed in SQL", `event.type == "attempt_failed" && event.data.error.status == 429`},
	{"selective, CEL only", `has(event.data.error) && event.data.error.status == 429`},
	{"everything", ""},
}

type auditBenchRow struct {
	auditBenchCase
	Matched int `json:"matched"`
	Reps    int `json:"reps"`
	// Seconds is the median over the repetitions; EventsPerSecond is the
	// events of the range per median second.
	Seconds         float64 `json:"seconds"`
	MinSeconds      float64 `json:"min_seconds"`
	EventsPerSecond float64 `json:"events_per_second"`
}

type auditBenchReport struct {
	benchHeader
	Events      int64           `json:"events"`
	Tasks       int             `json:"tasks"`
	FillSeconds float64         `json:"fill_seconds"`
	Rows        []auditBenchRow `json:"rows"`
}

// AuditParams are the parameters of [Audit].
type AuditParams struct {
	Events int // --events: events to write (about; tasks have 10 or 12)
	Reps   int // --reps: times each audit runs
}

// Audit writes about p.Events events in bulk SQL, then times Client.Audit
// over their whole time range with a selective filter the database
// narrows, an equivalent one it cannot narrow, and none; each p.Reps times,
// reporting the median. PostgreSQL only.
func Audit(ctx context.Context, cfg Config, p AuditParams) error {
	if p.Events < 12 || p.Events > 100_000_000 {
		return errmark.Mark(errors.Newf("--events %d: use 12 to 100000000", p.Events), ErrConfig)
	}
	if p.Reps < 1 || p.Reps > 100 {
		return errmark.Mark(errors.Newf("--reps %d: use 1 to 100", p.Reps), ErrConfig)
	}
	env, closeEnv, err := openBench(ctx, cfg, "audit")
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	report := auditBenchReport{benchHeader: env.header}
	since, until, err := fillAuditBench(ctx, env, p.Events, &report)
	if err != nil {
		return err
	}
	// The benchmark times filters over a million events on purpose: the
	// limits a server puts on a caller's filter would stop it.
	unbounded := sdk.FilterLimits{Timeout: 24 * time.Hour, Cost: math.MaxUint64, MaxScan: math.MaxInt}
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: env.obs.pool, Schema: env.cfg.Schema, Namespace: env.cfg.Namespace,
		FilterLimits: unbounded})
	if err != nil {
		return err
	}
	defer client.Close()
	for _, c := range auditBenchCases {
		row, err := timeAudit(ctx, client, c, since, until, p.Reps)
		if err != nil {
			return errors.Wrapf(err, "audit %q", c.Name)
		}
		row.EventsPerSecond = float64(report.Events) / row.Seconds
		env.logf("audit: %s: %d matched in %.2f s (median of %d)", c.Name, row.Matched, row.Seconds, row.Reps)
		report.Rows = append(report.Rows, row)
	}
	return printAuditBench(&env.cfg, report)
}

// fillAuditBench writes the histories and returns their time range.
func fillAuditBench(ctx context.Context, env *benchEnv, events int, report *auditBenchReport) (since, until time.Time, err error) {
	// Ten events a task, twelve for one in auditBenchFailEvery.
	tasks := int(float64(events) / (10 + 2.0/auditBenchFailEvery))
	tasks = max(tasks, 1)
	span := time.Duration(tasks)*auditBenchTaskSpacing + time.Minute
	base := time.Now().Add(-span).UTC().Truncate(time.Second)
	started := time.Now()
	for first := 1; first <= tasks; first += auditBenchTaskChunk {
		last := min(first+auditBenchTaskChunk-1, tasks)
		_, err := env.obs.pool.Exec(ctx, env.obs.q("AuditFill"), pgx.NamedArgs{
			"first": first, "last": last, "base": base, "namespace": env.cfg.Namespace,
			"task_spacing": auditBenchTaskSpacing, "event_spacing": auditBenchEventSpacing,
		})
		if err != nil {
			return since, until, errors.Wrapf(err, "write tasks %d to %d", first, last)
		}
		env.logf("audit: wrote %d of %d tasks", last, tasks)
	}
	if _, err := env.obs.pool.Exec(ctx, env.obs.q("AuditSummarizeBRIN")); err != nil {
		return since, until, errors.Wrap(err, "summarize the BRIN index")
	}
	if err := env.obs.analyze(ctx); err != nil {
		return since, until, err
	}
	if err := env.obs.pool.QueryRow(ctx, env.obs.q("EventCount")).Scan(&report.Events); err != nil {
		return since, until, errors.Wrap(err, "count events")
	}
	report.Tasks, report.FillSeconds = tasks, time.Since(started).Seconds()
	env.logf("audit: %d events of %d tasks written in %.1f s", report.Events, tasks, report.FillSeconds)
	return base, time.Now(), nil
}

// timeAudit runs one audit reps times over [since, until).
func timeAudit(ctx context.Context, client *sdk.Client, c auditBenchCase, since, until time.Time, reps int) (auditBenchRow, error) {
	row := auditBenchRow{auditBenchCase: c, Reps: reps}
	params := sdk.AuditParams{Since: since, Until: until}
	if c.Filter != "" {
		filter, err := sdk.CompileEventFilter(c.Filter)
		if err != nil {
			return row, err
		}
		params.Filter = filter
	}
	times := make([]time.Duration, reps)
	for i := range reps {
		matched := 0
		started := time.Now()
		err := client.Audit(ctx, params, func(sdk.AuditRecord) error {
			matched++
			return nil
		})
		times[i] = time.Since(started)
		if err != nil {
			return row, err
		}
		if i > 0 && matched != row.Matched {
			return row, errors.AssertionFailedf("run %d matched %d events, run 1 %d", i+1, matched, row.Matched)
		}
		row.Matched = matched
	}
	slices.Sort(times)
	row.Seconds, row.MinSeconds = times[len(times)/2].Seconds(), times[0].Seconds()
	return row, nil
}

func printAuditBench(cfg *Config, r auditBenchReport) error {
	if cfg.JSON {
		return printJSON(cfg.Stdout, r)
	}
	w := newTable(cfg.Stdout)
	fmt.Fprintf(w, "mode:\taudit: Client.Audit over %d events (%d tasks, written in %.1f s); median of %d runs\n",
		r.Events, r.Tasks, r.FillSeconds, r.Rows[0].Reps)
	printBenchEnv(w, r.benchHeader)
	fmt.Fprintf(w, "\nAUDIT\tFILTER\tMATCHED\tSECONDS\tMIN SECONDS\tEVENTS/S\n")
	for _, row := range r.Rows {
		filter := row.Filter
		if filter == "" {
			filter = "(none)"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%.2f\t%.0f\n", row.Name, filter, row.Matched, row.Seconds, row.MinSeconds, row.EventsPerSecond)
	}
	return w.Flush()
}
