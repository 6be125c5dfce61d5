package bench

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/namedsql"
)

// Every SQL statement the bench runs itself is in an embedded file, in the
// "-- name:" format of the engine's query files: bench.sql and audit.sql
// for PostgreSQL, sqlite.sql for the embedded store.
//
//go:embed *.sql
var queryFiles embed.FS

// The markers of the PostgreSQL files: schemaMarker becomes the quoted
// schema followed by a dot, as in the migrations, and schemaNameMarker the
// quoted schema alone.
const (
	schemaMarker     = "/* TEMPLATE: schema */"
	schemaNameMarker = "/* TEMPLATE: schema name */"
)

// pgQueries and liteQueries are the statements by name, markers left in,
// parsed on first use.
var (
	pgQueries   = sync.OnceValues(func() (map[string]string, error) { return loadQueries("bench.sql", "audit.sql") })
	liteQueries = sync.OnceValues(func() (map[string]string, error) { return loadQueries("sqlite.sql") })
)

// loadQueries parses the named query files into one map of statements.
func loadQueries(files ...string) (map[string]string, error) {
	return namedsql.Load(queryFiles, files...)
}

// query returns the named statement of queries; a missing name is a
// programming error.
func query(queries map[string]string, name string) string {
	q, ok := queries[name]
	if !ok {
		panic("bench: unknown query " + name)
	}
	return q
}

// pollParams are the session settings of the drain poll's connection.
// After the bulk insert the statistics say every task is pending, so the
// planner would scan the whole table (18 ms for 20,000 tasks on a 2-core
// machine) and keep the database busy while it is measured. An index-only
// scan of the partial indexes instead also marks the entries of tasks that
// moved on as dead, so later polls skip them.
var pollParams = map[string]string{"enable_seqscan": "off", "enable_bitmapscan": "off"}

// benchSQL runs the statements of bench.sql and audit.sql against one
// schema.
type benchSQL struct {
	pool    *pgxpool.Pool // the bench's own observation pool, not the workers'
	schema  string
	queries map[string]string // by name, markers replaced
}

func newBenchSQL(pool *pgxpool.Pool, schema string) (*benchSQL, error) {
	raw, err := pgQueries()
	if err != nil {
		return nil, err
	}
	marks := strings.NewReplacer(
		schemaMarker, pgx.Identifier{schema}.Sanitize()+".",
		schemaNameMarker, pgx.Identifier{schema}.Sanitize())
	queries := make(map[string]string, len(raw))
	for name, q := range raw {
		queries[name] = marks.Replace(q)
	}
	return &benchSQL{pool: pool, schema: schema, queries: queries}, nil
}

// q returns the named statement for the bench's schema.
func (b *benchSQL) q(name string) string { return query(b.queries, name) }

// serverVersion returns PostgreSQL's version string.
func (b *benchSQL) serverVersion(ctx context.Context) (string, error) {
	var v string
	err := b.pool.QueryRow(ctx, b.q("ServerVersion")).Scan(&v)
	return v, errors.Wrap(err, "read server_version")
}

// reset drops the bench schema and migrates it afresh, so every run starts
// from empty tables. The --schema the user named may be a real one, so it
// drops only a schema that is plainly the bench's own: cairn's tables and
// nothing else, and no task of a type the bench does not create. It never
// drops public, whose ownership and grants a re-creation would not restore.
func (b *benchSQL) reset(ctx context.Context, migrate func(context.Context) error) error {
	refuse := func(why string) error {
		return errmark.Mark(errors.Newf("schema %s %s; the bench drops and recreates its schema, so name another with --schema (or drop it yourself)", b.schema, why), ErrConfig)
	}
	if b.schema == "public" {
		return refuse("is the standard public schema")
	}
	var (
		exists          bool
		cairnTables     int
		foreignRelation int
	)
	err := b.pool.QueryRow(ctx, b.q("SchemaContents"), pgx.NamedArgs{"schema": b.schema}).Scan(&exists, &cairnTables, &foreignRelation)
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
		if err := b.pool.QueryRow(ctx, b.q("TaskForeignExists")).Scan(&other); err != nil {
			return errors.Wrapf(err, "inspect schema %s", b.schema)
		}
		if other {
			return refuse("holds tasks the bench did not create")
		}
		if _, err := b.pool.Exec(ctx, b.q("SchemaDrop")); err != nil {
			return errors.Wrapf(err, "drop schema %s", b.schema)
		}
	}
	return migrate(ctx)
}

// claimLatency waits, polling, until every task of ids has been claimed
// (timeout bounds the wait), then returns the percentiles of claim time
// less start time over them.
func (b *benchSQL) claimLatency(ctx context.Context, ids []uuid.UUID, timeout time.Duration) (latencyPercentiles, error) {
	deadline := time.Now().Add(timeout)
	for {
		var (
			unclaimed int
			pcts      []float64
			most      float64
		)
		if err := b.pool.QueryRow(ctx, b.q("TaskClaimLatency"), pgx.NamedArgs{"ids": ids}).Scan(&unclaimed, &pcts, &most); err != nil {
			return latencyPercentiles{}, errors.Wrap(err, "read claim latency")
		}
		if unclaimed == 0 && len(pcts) == 3 {
			return latencyPercentiles{Count: len(ids), P50: pcts[0], P90: pcts[1], P99: pcts[2], Max: most}, nil
		}
		if time.Now().After(deadline) {
			return latencyPercentiles{}, errors.Newf("%d of %d tasks not claimed after %s", unclaimed, len(ids), timeout)
		}
		select {
		case <-ctx.Done():
			return latencyPercentiles{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *benchSQL) analyze(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, b.q("TablesAnalyze"))
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
	err := conn.QueryRow(ctx, b.q("TaskUnfinishedExists")).Scan(&found)
	return found, errors.Wrap(err, "look for unfinished tasks")
}

// unfinished returns how many tasks are not terminal yet, on a connection
// from pollConn.
func (b *benchSQL) unfinished(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	err := conn.QueryRow(ctx, b.q("TaskUnfinishedCount")).Scan(&n)
	return n, errors.Wrap(err, "count unfinished tasks")
}

// drainSummary is what the database says after a drain.
type drainSummary struct {
	completed, otherTerminal, events int64
	prefillLeft                      int64 // prefilled tasks retention has not removed
	lastFinished                     *time.Time
}

// prefillFinished inserts n finished ballast tasks, 100,000 per statement.
func (b *benchSQL) prefillFinished(ctx context.Context, n int) error {
	for done := 0; done < n; {
		chunk := min(100_000, n-done)
		if _, err := b.pool.Exec(ctx, b.q("TaskPrefillFinished"), chunk); err != nil {
			return errors.Wrap(err, "prefill finished tasks")
		}
		done += chunk
	}
	// Ballast of a day ago has had its events' BRIN ranges summarized by
	// the leader long since; the run's own leader would otherwise spend
	// its first pass on them, during the drain.
	_, err := b.pool.Exec(ctx, b.q("AuditSummarizeBRIN"))
	return errors.Wrap(err, "summarize the ballast's event ranges")
}

func (b *benchSQL) drainSummary(ctx context.Context) (drainSummary, error) {
	var s drainSummary
	err := b.pool.QueryRow(ctx, b.q("DrainSummary")).Scan(&s.completed, &s.otherTerminal, &s.lastFinished, &s.events, &s.prefillLeft)
	return s, errors.Wrap(err, "summarize drain")
}
