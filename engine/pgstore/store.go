// Package pgstore is cairn's PostgreSQL driver: the [store.Store] over a
// pgx v5 pool, its SQL (named queries in the embedded *.sql files), the
// translation of PostgreSQL's errors into the store's marks, LISTEN/NOTIFY
// as its [store.Listener], the migration runner, and transactions: its own
// ([Store.Begin]) and the caller's ([Store.WithTx], the outbox).
//
// It imports engine/store, engine/internal/plan (what both drivers do
// alike before they write), history and migrations, and never the engine
// root.
package pgstore

import (
	"context"
	"embed"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/namedsql"
	"github.com/cairnflow/cairn/migrations"
)

// DefaultSchema is the PostgreSQL schema cairn's tables live in unless
// configured otherwise.
const DefaultSchema = "cairn"

// queryFiles holds every SQL statement the engine runs: queries.sql and,
// for larger features, a file of their own (audit.sql, ...), all in the
// same "-- name:" format. A name defined twice is an error.
//
//go:embed *.sql
var queryFiles embed.FS

// querier is what the store needs of a connection: a pool, a connection or a
// transaction. *pgxpool.Pool and pgx.Tx satisfy it.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// txQuerier is the pool or a transaction: what runs on either and opens a
// transaction of its own (a savepoint within one).
type txQuerier interface {
	querier
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config configures a [Store].
type Config struct {
	// Pool is the connection pool. Required.
	Pool *pgxpool.Pool
	// Schema is the schema holding cairn's tables. Default [DefaultSchema].
	Schema string
	// Metrics, when set, counts the events the store writes
	// (engine.Metrics). Nil costs nothing.
	Metrics store.Observer
	// Clock tells the time of the events the store writes. Default
	// [store.WallClock].
	Clock store.Clock
	// ControlPool, when set, carries the statements that must not wait
	// behind claims and appends for a connection: lease heartbeats and
	// leadership attempts (a late heartbeat loses leases, a late attempt
	// loses leadership). A pool of one connection is enough. Nil: Pool.
	ControlPool *pgxpool.Pool
	// ListenURL, when set, is the connection string of the listener's own
	// connection (LISTEN needs a session of its own: through a pooler in
	// transaction mode, point it at PostgreSQL itself or at a session-mode
	// pool). Empty: Pool's configuration.
	ListenURL string
	// HistoryLimits bound what signals may add to a task's history; the
	// zero value takes the defaults ([store.HistoryLimits]).
	HistoryLimits store.HistoryLimits
}

// Store is cairn's PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// db runs the statements: pool, or, in a store bound to a
	// transaction (see tx.go), the transaction.
	db txQuerier
	// control runs heartbeats and leadership: Config.ControlPool, else
	// pool; in a store bound to a transaction, the transaction.
	control      querier
	listenConf   *pgx.ConnConfig // the listener's connection
	probeChannel string          // the prefix of each listener's own probe channel (<prefix>.<8 hex>); payload is the probe's token
	schema       string
	channel      string // NOTIFY channel: work became ready; payload is the queue
	doneChannel  string // NOTIFY channel: tasks finished; payload is their ids, comma-separated
	// cancelChannel: running tasks whose cancel was requested; payload is
	// their ids, comma-separated.
	cancelChannel string
	// streamChannel: tasks whose streams have new entries; payload is the
	// task's id.
	streamChannel string
	// inquiryChannel: pending inquiries were made; payload is their
	// namespace. answeredChannel: an inquiry was answered; payload is its
	// id.
	inquiryChannel, answeredChannel string
	// remoteChannel: remote steps were dispatched; payload is their
	// namespace/queue.
	remoteChannel string
	// modelChannel: a model limit's waiters may go; payload is the
	// namespace, a newline and the model.
	modelChannel string
	q            map[string]string
	pos          positionals         // q in positional form, for db and control
	observer     *store.ObserverSlot // Config.Metrics, or one attached later (ObserverAttach)
	// metrics is what the store counts its writes into: observer, or, in a
	// store bound to a transaction, observer's calls held until the commit.
	metrics store.Observer
	clock   store.Clock
	parents *plan.ParentStates  // parents whose children end here: see reportToParents
	limits  store.HistoryLimits // resolved: 0 is no bound
	// txn is the transaction a store bound to one runs in (see tx.go);
	// nil on the store itself.
	txn *txState
}

// New returns a store over cfg.Pool. It does not touch the database.
func New(cfg Config) (*Store, error) {
	if cfg.Pool == nil {
		return nil, errors.New("pgstore: Config.Pool is required")
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
	if !preparesStatements(cfg.Pool) {
		for _, f := range hotFunctions(q) {
			q[f.query] = f.call(schema)
		}
	}
	listenConf := cfg.Pool.Config().ConnConfig
	if cfg.ListenURL != "" {
		if listenConf, err = pgx.ParseConfig(cfg.ListenURL); err != nil {
			return nil, errors.Newf("pgstore: Config.ListenURL does not parse (%s)", lastClause(err.Error()))
		}
	}
	control := cfg.ControlPool
	if control == nil {
		control = cfg.Pool
	}
	slot := store.NewObserverSlot(cfg.Metrics)
	pos := newPositionals(q)
	return &Store{pool: cfg.Pool, db: positionalDB{cfg.Pool, pos}, control: positionalDB{control, pos}, pos: pos, listenConf: listenConf, schema: schema,
		channel: schema + ".ready", doneChannel: schema + ".done", cancelChannel: schema + ".cancel", streamChannel: schema + ".stream", probeChannel: schema + ".probe", q: q,
		inquiryChannel: schema + ".inquiry", answeredChannel: schema + ".answered", modelChannel: schema + ".model", remoteChannel: schema + ".remote",
		observer: slot, metrics: slot, clock: cfg.Clock, parents: &plan.ParentStates{}, limits: cfg.HistoryLimits.Resolved()}, nil
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Observer returns the observer the store counts its writes into
// (Config.Metrics, or one attached), or nil.
func (s *Store) Observer() store.Observer { return s.observer.Observer() }

// ObserverAttach implements [store.Store].
func (s *Store) ObserverAttach(o store.Observer) store.Observer { return s.observer.Attach(o) }

// Schema returns the schema the store works in.
func (s *Store) Schema() string { return s.schema }

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

// loadQueries parses every embedded query file and fills in the schema
// marker.
func loadQueries(schema string) (map[string]string, error) {
	templates, err := queryTemplates()
	if err != nil {
		return nil, err
	}
	prefix := pgx.Identifier{schema}.Sanitize() + "."
	qs := make(map[string]string, len(templates)+1)
	for name, q := range templates {
		qs[name] = strings.ReplaceAll(q, migrations.SchemaMarker, prefix)
	}
	qs[claimExcluding] = strings.ReplaceAll(qs["TaskClaimMany"], excludeMarker, "AND t.id <> ALL(@exclude::uuid[])")
	return qs, nil
}

// queryTemplates are the statements of queryFiles, parsed once: every
// store (and every migration) substitutes its own schema in them.
var queryTemplates = sync.OnceValues(func() (map[string]string, error) {
	return namedsql.Load(queryFiles, "*.sql")
})

// claimExcluding is TaskClaimMany leaving the tasks of
// TaskClaimParams.Exclude: its text with each excludeMarker made a test
// against @exclude. A claim without exclusions runs TaskClaimMany itself,
// whose plan the test would change (a generic plan estimates the rows an
// array parameter leaves), so the common claim costs what it did.
const claimExcluding = "TaskClaimManyExcluding"

// excludeMarker is where TaskClaimMany's walks test TaskClaimParams.Exclude.
const excludeMarker = "/* EXCLUDE */"

// sql returns the named query; a missing name is a programming error.
func (s *Store) sql(name string) string {
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
		// The driver's "no rows in result set" is its own words; the caller's
		// wrapping says what was not found.
		return errors.WithStack(store.ErrNotFound)
	}
	if isConnectionError(err) {
		return errmark.Mark(oneLine(err), store.ErrUnavailable)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
			return errors.Wrap(err, errPooledStatements)
		case "42883": // undefined_function
			if strings.Contains(pgErr.Message, ".hot_") || strings.Contains(pgErr.Message, " hot_") {
				return errors.Wrap(err, "the hot functions of this version of cairn are missing from its schema (a store without prepared statements calls them): run cairn migrate up with this version, as the schema's owner")
			}
		case "42P01": // undefined_table: a schema never migrated (a cell opened while down)
			return errmark.Mark(errors.Wrap(err, "cairn's tables are missing from this schema: run cairn migrate up"), store.ErrUnavailable)
		case "CRN02": // refuse_moved_namespace: a process on the old placement map
			err = errors.WithHint(err, "update the placement map and restart, or send the request to a process that has")
			return errmark.Mark(errmark.Mark(err, store.ErrNamespaceMoved), store.ErrUnavailable)
		case "23505": // unique_violation
			return errmark.Mark(err, store.ErrConflict)
		case "40P01", "40001": // deadlock_detected, serialization_failure
			return errmark.Mark(err, store.ErrRetryable)
		}
	}
	return err
}

// oneLine gives err a message of one line, if its own spans several:
// pgconn lists each host it tried on a line of its own (twice each with
// sslmode=prefer), which breaks line-based logs. The lines are joined
// with "; ", repeated ones once; the error itself is kept beneath.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "\n") {
		return err
	}
	var parts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !seen[line] {
			seen[line] = true
			parts = append(parts, line)
		}
	}
	if len(parts) == 0 {
		return err
	}
	head, rest := parts[0], parts[1:]
	if strings.HasSuffix(head, ":") && len(rest) > 0 {
		return &oneLineError{cause: err, msg: head + " " + strings.Join(rest, "; ")}
	}
	return &oneLineError{cause: err, msg: strings.Join(parts, "; ")}
}

// oneLineError is an error shown on one line (see oneLine).
type oneLineError struct {
	cause error
	msg   string
}

func (e *oneLineError) Error() string { return e.msg }
func (e *oneLineError) Unwrap() error { return e.cause }

// errPooledStatements explains the errors pgx's prepared
// statements meet through a pooler in transaction mode: a statement
// prepared on one server connection is found on another, or not found.
const errPooledStatements = "prepared statements do not survive a pooler in transaction mode: " +
	"if the database URL points at one (PgBouncer pool_mode=transaction), set --pooler transaction " +
	"(env CAIRN_POOLER; pgstore.PoolerTransaction, or default_query_exec_mode=cache_describe in the URL)"

// isKeyRetiredMidStart reports whether err is refuse_retired_keys' refusal
// of a start (migration 0011).
func isKeyRetiredMidStart(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "CRN01"
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return errors.Wrap(interpretError(s.pool.Ping(ctx)), "ping PostgreSQL")
}

// isConnectionError reports whether err is the database being out of
// reach (refused or dropped connections, a server shutting down or
// starting up) rather than a refusal of the statement itself.
func isConnectionError(err error) bool {
	if err == nil {
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08": // connection exception
			return true
		case "57": // operator intervention: admin_shutdown, crash_shutdown, cannot_connect_now
			return pgErr.Code != "57014" // query_canceled is a statement's own timeout
		}
	}
	var closed interface{ SafeToRetry() bool }
	return errors.As(err, &closed) && closed.SafeToRetry()
}

// now reads the store's clock at the precision it stores.
func (s *Store) now() time.Time { return plan.Now(s.clock) }
