package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// audit: the time of Client.Audit over a range of about a million events,
// with a selective filter the database can narrow by event type, the same
// filter with nothing for the database to narrow by, and no filter.
//
// The histories are written by SQL in bulk (generate_series), not through
// the engine: this measures reading them. The statements are here rather
// than in sql.go because only this mode runs them.

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

// sqlAuditBenchFill writes tasks @first..@last (completed) and their
// histories: task_scheduled, attempt_started, step_completed × 7 (or, for
// a failing task, three steps, attempt_failed, attempt_started and four
// steps), task_completed. Task i starts at @base + i × @task_spacing.
const sqlAuditBenchFill = `WITH src AS MATERIALIZED (
    SELECT i, gen_random_uuid() AS id, i % 5 = 0 AS failing,
        CASE WHEN i % 2 = 0 THEN 'bench.audit.extract' ELSE 'bench.audit.sync' END AS type,
        (ARRAY[429, 503, 500])[(i / 5) % 3 + 1] AS status,
        @base::timestamptz + i * @task_spacing::interval AS start
    FROM generate_series(@first::bigint, @last::bigint) AS i
), tpl(failing, seq, type, attempt, pos) AS (VALUES
    (false, 1, 'task_scheduled', 0, 0), (false, 2, 'attempt_started', 1, 0),
    (false, 3, 'step_completed', 1, 0), (false, 4, 'step_completed', 1, 1), (false, 5, 'step_completed', 1, 2),
    (false, 6, 'step_completed', 1, 3), (false, 7, 'step_completed', 1, 4), (false, 8, 'step_completed', 1, 5),
    (false, 9, 'step_completed', 1, 6), (false, 10, 'task_completed', 1, 0),
    (true, 1, 'task_scheduled', 0, 0), (true, 2, 'attempt_started', 1, 0),
    (true, 3, 'step_completed', 1, 0), (true, 4, 'step_completed', 1, 1), (true, 5, 'step_completed', 1, 2),
    (true, 6, 'attempt_failed', 1, 3), (true, 7, 'attempt_started', 2, 0),
    (true, 8, 'step_completed', 2, 3), (true, 9, 'step_completed', 2, 4), (true, 10, 'step_completed', 2, 5),
    (true, 11, 'step_completed', 2, 6), (true, 12, 'task_completed', 2, 0)
), ins AS (
    INSERT INTO /* TEMPLATE: schema */tasks (id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, lease_epoch, input, output, last_seq, created_at, updated_at, started_at, finished_at, fair_at)
    SELECT id, @namespace, 'default', type, 1, 'completed', 0, start,
        CASE WHEN failing THEN 2 ELSE 1 END, 5, CASE WHEN failing THEN 2 ELSE 1 END,
        jsonb_build_object('document', i), jsonb_build_object('document', i, 'pages', i % 40),
        CASE WHEN failing THEN 12 ELSE 10 END, start, start, start, start + interval '0.5 s', start
    FROM src
)
INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
SELECT s.id, t.seq, t.type, s.start + t.seq * @event_spacing::interval, t.attempt, CASE t.type
    WHEN 'task_scheduled' THEN jsonb_build_object('v', 1, 'namespace', @namespace, 'task_type', s.type, 'type_version', 1,
        'queue', 'default', 'priority', 0, 'input', jsonb_build_object('document', s.i), 'run_at', s.start, 'max_attempts', 5)
    WHEN 'attempt_started' THEN jsonb_build_object('v', 1, 'worker_id', 'bench-worker-' || s.i % 8, 'lease_epoch', t.attempt,
        'lease_expires_at', s.start + interval '30 s')
    WHEN 'step_completed' THEN jsonb_build_object('v', 1, 'position', t.pos,
        'name', (ARRAY['fetch', 'ocr', 'classify', 'extract', 'validate', 'enrich', 'store'])[t.pos + 1],
        'output', jsonb_build_object('ms', s.i % 700, 'ok', true, 'pages', s.i % 40))
    WHEN 'attempt_failed' THEN jsonb_build_object('v', 1, 'error', jsonb_build_object('class', 'transient',
        'message', 'upstream answered HTTP ' || s.status, 'kind', 'http', 'status', s.status, 'step', 'extract',
        'position', 3, 'classified_by', 'default:step'), 'next_run_at', s.start + interval '1 s')
    ELSE jsonb_build_object('v', 1, 'output', jsonb_build_object('document', s.i, 'pages', s.i % 40))
END
FROM src AS s JOIN tpl AS t ON t.failing = s.failing
ORDER BY s.i, t.seq`

// sqlAuditBenchSummarize summarizes the BRIN ranges written since the last
// vacuum, as autosummarize would soon after, so the first audit does not
// read the unsummarized tail in full.
const sqlAuditBenchSummarize = `SELECT brin_summarize_new_values('/* TEMPLATE: schema */events_at_brin_idx'::regclass)`

// sqlAuditBenchEvents counts the events written.
const sqlAuditBenchEvents = `SELECT count(*) FROM /* TEMPLATE: schema */events`

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
		return errors.Mark(errors.Newf("--events %d: use 12 to 100000000", p.Events), ErrConfig)
	}
	if p.Reps < 1 || p.Reps > 100 {
		return errors.Mark(errors.Newf("--reps %d: use 1 to 100", p.Reps), ErrConfig)
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
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: env.obs.pool, Schema: env.cfg.Schema, Namespace: env.cfg.Namespace})
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
		_, err := env.obs.pool.Exec(ctx, env.obs.q(sqlAuditBenchFill), pgx.NamedArgs{
			"first": first, "last": last, "base": base, "namespace": env.cfg.Namespace,
			"task_spacing": auditBenchTaskSpacing, "event_spacing": auditBenchEventSpacing,
		})
		if err != nil {
			return since, until, errors.Wrapf(err, "write tasks %d to %d", first, last)
		}
		env.logf("audit: wrote %d of %d tasks", last, tasks)
	}
	if _, err := env.obs.pool.Exec(ctx, env.obs.q(sqlAuditBenchSummarize)); err != nil {
		return since, until, errors.Wrap(err, "summarize the BRIN index")
	}
	if err := env.obs.analyze(ctx); err != nil {
		return since, until, err
	}
	if err := env.obs.pool.QueryRow(ctx, env.obs.q(sqlAuditBenchEvents)).Scan(&report.Events); err != nil {
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
