package engine

import (
	"context"
	"embed"
	"io/fs"
	"strings"

	"github.com/cairnflow/cairn/migrations"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the PostgreSQL schema cairn's tables live in unless
// configured otherwise.
const DefaultSchema = "cairn"

// DefaultNamespace is the namespace tasks belong to unless a caller names
// another.
const DefaultNamespace = "default"

// Sentinel errors the store returns, marked so they survive wrapping.
var (
	// ErrNotFound: no task with that id in that namespace.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the task moved on since the caller read it (another
	// writer appended first), or a unique key is taken.
	ErrConflict = errors.New("conflict")
	// ErrFenced: the caller's lease epoch is no longer the task's; the
	// attempt it acts for is over and its writes are refused.
	ErrFenced = errors.New("fenced: lease epoch is stale")
	// ErrCancelRequested is the cancellation cause of an attempt's context
	// when the task's cancel was requested.
	ErrCancelRequested = errors.New("task cancel requested")
	// ErrTaskState: the task's status does not allow the request (retrying
	// a task that is not dead-lettered, for instance). The message names
	// the status.
	ErrTaskState = errors.New("task state does not allow this")
	// ErrRetryable marks a statement PostgreSQL aborted for a reason that
	// goes away when it runs again: a deadlock or a serialization failure.
	ErrRetryable = errors.New("retryable database error")
	// ErrUnsupported: the store does not implement the request (the
	// embedded store, for a feature it does not have yet). The message names
	// it.
	ErrUnsupported = errors.New("not supported by this store")
)

// queryFiles holds every SQL statement the engine runs: queries.sql and,
// for larger features, a file of their own (audit.sql, ...), all in the
// same "-- name:" format. A name defined twice is an error.
//
//go:embed *.sql
var queryFiles embed.FS

// Querier is what the store needs of a connection: a pool, a connection or a
// transaction. *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PGStoreConfig configures a [Store].
type PGStoreConfig struct {
	// Pool is the connection pool. Required.
	Pool *pgxpool.Pool
	// Schema is the schema holding cairn's tables. Default [DefaultSchema].
	Schema string
	// Metrics, when set, counts the events the store writes (see
	// [NewMetrics]). Nil costs nothing.
	Metrics *Metrics
}

// Store is cairn's PostgreSQL store. It is safe for concurrent use.
type PGStore struct {
	pool        *pgxpool.Pool
	schema      string
	channel     string // NOTIFY channel: work became ready; payload is the queue
	doneChannel string // NOTIFY channel: tasks finished; payload is their ids, comma-separated
	// cancelChannel: running tasks whose cancel was requested; payload is
	// their ids, comma-separated.
	cancelChannel string
	q             map[string]string
	metrics       *Metrics // nil: none
}

// NewStore returns a store over cfg.Pool. It does not touch the database.
func NewPGStore(cfg PGStoreConfig) (*PGStore, error) {
	if cfg.Pool == nil {
		return nil, errors.New("engine: PGStoreConfig.Pool is required")
	}
	schema := cfg.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	q, err := loadQueries(schema)
	if err != nil {
		return nil, err
	}
	return &PGStore{pool: cfg.Pool, schema: schema, channel: schema + ".ready", doneChannel: schema + ".done", cancelChannel: schema + ".cancel", q: q,
		metrics: cfg.Metrics}, nil
}

// Pool returns the store's connection pool.
func (s *PGStore) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema the store works in.
func (s *PGStore) Schema() string { return s.schema }

// ValidateSchemaName checks that name can serve as cairn's schema: a plain
// identifier of at most 48 characters, so the names derived from it fit
// PostgreSQL's 63-byte limit.
func ValidateSchemaName(name string) error {
	if name == "" || len(name) > 48 {
		return errors.Newf("schema name %q: must be 1 to 48 characters", name)
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return errors.Newf("schema name %q: use lowercase letters, digits and underscores, starting with a letter or underscore", name)
		}
	}
	return nil
}

// loadQueries parses every embedded query file, in name order.
func loadQueries(schema string) (map[string]string, error) {
	names, err := fs.Glob(queryFiles, "*.sql")
	if err != nil {
		return nil, errors.Wrap(err, "list query files")
	}
	var all strings.Builder
	for _, name := range names {
		src, err := queryFiles.ReadFile(name)
		if err != nil {
			return nil, errors.Wrapf(err, "read query file %s", name)
		}
		all.Write(src)
		all.WriteByte('\n')
	}
	return parseQueries(all.String(), schema)
}

// parseQueries splits the embedded query file at its "-- name:" lines and
// fills in the schema marker.
func parseQueries(src, schema string) (map[string]string, error) {
	prefix := pgx.Identifier{schema}.Sanitize() + "."
	out := map[string]string{}
	var name string
	var body strings.Builder
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSpace(strings.ReplaceAll(body.String(), migrations.SchemaMarker, prefix))
		}
		body.Reset()
	}
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
			flush()
			name = strings.TrimSpace(rest)
			if _, dup := out[name]; dup {
				return nil, errors.AssertionFailedf("query %s defined twice", name)
			}
			continue
		}
		if strings.HasPrefix(trimmed, "--") {
			continue // comments never reach the server, so no "@" in them is taken for a parameter
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	flush()
	return out, nil
}

// sql returns the named query; a missing name is a programming error.
func (s *PGStore) sql(name string) string {
	q, ok := s.q[name]
	if !ok {
		panic("engine: unknown query " + name)
	}
	return q
}

// interpretError translates pgx errors once, at the store boundary, so that
// nothing above it sees pgx types.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.Mark(err, ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return errors.Mark(err, ErrConflict)
		case "40P01", "40001": // deadlock_detected, serialization_failure
			return errors.Mark(err, ErrRetryable)
		}
	}
	return err
}

// Ping checks that the database answers.
func (s *PGStore) Ping(ctx context.Context) error {
	return errors.Wrap(s.pool.Ping(ctx), "ping PostgreSQL")
}
