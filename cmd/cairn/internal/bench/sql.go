package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every SQL statement `cairn bench` runs itself, in one place. The engine's
// own statements stay in engine/queries.sql; these only reset the bench
// schema and observe it. benchSchemaMarker becomes the quoted schema
// followed by a dot, as in the migrations, and benchSchemaNameMarker the
// quoted schema alone; values are bind parameters.

const (
	benchSchemaMarker     = "/* TEMPLATE: schema */"
	benchSchemaNameMarker = "/* TEMPLATE: schema name */"
)

const (
	// sqlServerVersion is reported with every result.
	sqlServerVersion = `SHOW server_version`

	// sqlSchemaContents says whether the schema exists, how many of
	// cairn's two essential tables it has, and how many relations (tables,
	// views, sequences) cairn did not create: only a schema with both and
	// none of the others is ever dropped.
	sqlSchemaContents = `SELECT
  EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = @schema),
  count(*) FILTER (WHERE c.relkind = 'r' AND c.relname IN ('tasks', 'schema_migrations')),
  count(*) FILTER (WHERE c.relname NOT IN ('tasks', 'events', 'leaders', 'queues', 'schedules', 'rate_limits', 'task_types', 'schema_migrations'))
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = @schema AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')`

	// sqlDropSchema drops the bench schema, once reset has made sure it is
	// the bench's.
	sqlDropSchema = `DROP SCHEMA /* TEMPLATE: schema name */ CASCADE`

	// sqlForeignTasks says whether the schema holds tasks the bench did not
	// create (every bench type name starts with "bench.").
	sqlForeignTasks = `SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE type NOT LIKE 'bench.%')`

	// sqlAnalyze refreshes planner statistics after the bulk insert, so
	// every drain starts with the statistics of its backlog, whatever
	// autovacuum managed to do during the insert.
	sqlAnalyze = `ANALYZE /* TEMPLATE: schema */tasks, /* TEMPLATE: schema */events`

	// sqlAnyUnfinished is the drain poll: is any task not terminal yet?
	// Both halves match partial indexes (tasks_claim_idx, tasks_lease_idx)
	// and stop at the first entry, so a poll costs little however many
	// tasks remain; counting them on every poll slowed a 2-core machine's
	// drain by a fifth. It runs on a connection that steers the planner to
	// those indexes; see pollParams.
	sqlAnyUnfinished = `SELECT
   EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE status IN ('pending', 'retrying'))
OR EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE status = 'running')`

	// sqlUnfinished counts the tasks not terminal yet, for progress
	// reports about once a second.
	sqlUnfinished = `SELECT
  (SELECT count(*) FROM /* TEMPLATE: schema */tasks WHERE status IN ('pending', 'retrying'))
+ (SELECT count(*) FROM /* TEMPLATE: schema */tasks WHERE status = 'running')`

	// sqlDrainSummary is read once after a drain. Prefilled tasks (see
	// sqlPrefillFinished) are not the drain's, nor are their four events
	// each, which the caller subtracts.
	sqlDrainSummary = `SELECT
  count(*) FILTER (WHERE status = 'completed' AND type <> 'bench.prefill'),
  count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'dead_lettered') AND type <> 'bench.prefill'),
  max(finished_at) FILTER (WHERE type <> 'bench.prefill'),
  (SELECT count(*) FROM /* TEMPLATE: schema */events)
FROM /* TEMPLATE: schema */tasks`

	// sqlPrefillFinished inserts $1 tasks that finished long ago, each with
	// the four events a one-step task leaves, so a drain can be measured
	// with history piled up in both tables. They are written directly, not
	// through the engine: this is ballast, not a workload.
	sqlPrefillFinished = `WITH t AS (
    INSERT INTO /* TEMPLATE: schema */tasks (id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, lease_epoch, output, last_seq, created_at, updated_at, started_at, finished_at)
    SELECT gen_random_uuid(), 'default', 'default', 'bench.prefill', 1, 'completed', 0, now(),
        1, 1, 1, '1', 4, now(), now(), now(), now()
    FROM generate_series(1, $1)
    RETURNING id
)
INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
SELECT t.id, e.seq, e.type, now(), e.attempt, e.data::jsonb FROM t CROSS JOIN (VALUES
    (1, 'task_scheduled', 0, '{"v":1,"namespace":"default","task_type":"bench.prefill","type_version":1,"queue":"default","priority":0,"run_at":"2026-01-01T00:00:00Z","max_attempts":1}'),
    (2, 'attempt_started', 1, '{"v":1,"worker_id":"prefill","lease_epoch":1,"lease_expires_at":"2026-01-01T00:00:00Z"}'),
    (3, 'step_completed', 1, '{"v":1,"position":0,"name":"noop","output":1}'),
    (4, 'task_completed', 1, '{"v":1,"output":1}')) AS e(seq, type, attempt, data)`
)

// pollParams are the session settings of the drain poll's connection.
// After the bulk insert the statistics say every task is pending, so the
// planner would scan the whole table (18 ms for 20,000 tasks on a 2-core
// machine) and keep the database busy while it is measured. An index-only
// scan of the partial indexes instead also marks the entries of tasks that
// moved on as dead, so later polls skip them.
var pollParams = map[string]string{"enable_seqscan": "off", "enable_bitmapscan": "off"}

// benchSQL runs the statements above against one schema.
type benchSQL struct {
	pool   *pgxpool.Pool // the bench's own observation pool, not the workers'
	schema string
	prefix string // quoted schema and a dot
}

func newBenchSQL(pool *pgxpool.Pool, schema string) *benchSQL {
	return &benchSQL{pool: pool, schema: schema, prefix: pgx.Identifier{schema}.Sanitize() + "."}
}

func (b *benchSQL) q(sql string) string {
	sql = strings.ReplaceAll(sql, benchSchemaMarker, b.prefix)
	return strings.ReplaceAll(sql, benchSchemaNameMarker, pgx.Identifier{b.schema}.Sanitize())
}

// serverVersion returns PostgreSQL's version string.
func (b *benchSQL) serverVersion(ctx context.Context) (string, error) {
	var v string
	err := b.pool.QueryRow(ctx, sqlServerVersion).Scan(&v)
	return v, errors.Wrap(err, "read server_version")
}

// reset drops the bench schema and migrates it afresh, so every run starts
// from empty tables. The --schema the user named may be a real one, so it
// drops only a schema that is plainly the bench's own: cairn's tables and
// nothing else, and no task of a type the bench does not create. It never
// drops public, whose ownership and grants a re-creation would not restore.
func (b *benchSQL) reset(ctx context.Context, migrate func(context.Context) error) error {
	refuse := func(why string) error {
		return errors.Mark(errors.Newf("schema %s %s; the bench drops and recreates its schema, so name another with --schema (or drop it yourself)", b.schema, why), ErrConfig)
	}
	if b.schema == "public" {
		return refuse("is the standard public schema")
	}
	var (
		exists          bool
		cairnTables     int
		foreignRelation int
	)
	err := b.pool.QueryRow(ctx, sqlSchemaContents, pgx.NamedArgs{"schema": b.schema}).Scan(&exists, &cairnTables, &foreignRelation)
	if err != nil {
		return errors.Wrapf(err, "inspect schema %s", b.schema)
	}
	if exists {
		switch {
		case foreignRelation > 0:
			return refuse(fmt.Sprintf("holds %d tables, views or sequences that are not cairn's", foreignRelation))
		case cairnTables < 2:
			return refuse("exists but is not a cairn schema")
		}
		var other bool
		if err := b.pool.QueryRow(ctx, b.q(sqlForeignTasks)).Scan(&other); err != nil {
			return errors.Wrapf(err, "inspect schema %s", b.schema)
		}
		if other {
			return refuse("holds tasks the bench did not create")
		}
		if _, err := b.pool.Exec(ctx, b.q(sqlDropSchema)); err != nil {
			return errors.Wrapf(err, "drop schema %s", b.schema)
		}
	}
	return migrate(ctx)
}

func (b *benchSQL) analyze(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, b.q(sqlAnalyze))
	return errors.Wrap(err, "analyze bench tables")
}

// pollConn opens the connection the drain polls on, with pollParams.
func (b *benchSQL) pollConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := b.pool.Config().ConnConfig.Copy()
	for k, v := range pollParams {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	return conn, errors.Wrap(err, "open the drain poll connection")
}

// anyUnfinished says whether any task is not terminal yet, on a
// connection from pollConn.
func (b *benchSQL) anyUnfinished(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var found bool
	err := conn.QueryRow(ctx, b.q(sqlAnyUnfinished)).Scan(&found)
	return found, errors.Wrap(err, "look for unfinished tasks")
}

// unfinished returns how many tasks are not terminal yet, on a connection
// from pollConn.
func (b *benchSQL) unfinished(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	err := conn.QueryRow(ctx, b.q(sqlUnfinished)).Scan(&n)
	return n, errors.Wrap(err, "count unfinished tasks")
}

// drainSummary is what the database says after a drain.
type drainSummary struct {
	completed, otherTerminal, events int64
	lastFinished                     *time.Time
}

// prefillFinished inserts n finished ballast tasks, 100,000 per statement.
func (b *benchSQL) prefillFinished(ctx context.Context, n int) error {
	for done := 0; done < n; {
		chunk := min(100_000, n-done)
		if _, err := b.pool.Exec(ctx, b.q(sqlPrefillFinished), chunk); err != nil {
			return errors.Wrap(err, "prefill finished tasks")
		}
		done += chunk
	}
	return nil
}

func (b *benchSQL) drainSummary(ctx context.Context) (drainSummary, error) {
	var s drainSummary
	err := b.pool.QueryRow(ctx, b.q(sqlDrainSummary)).Scan(&s.completed, &s.otherTerminal, &s.lastFinished, &s.events)
	return s, errors.Wrap(err, "summarize drain")
}
