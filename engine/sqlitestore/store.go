// Package sqlitestore is cairn's embedded store: the event log, projection,
// idempotency keys, leases and fencing, timers and cron of [store.Store] in
// one SQLite file, through modernc.org/sqlite (pure Go, no cgo). It serves
// `cairn dev`, single-node deployments and tests of user workflows, with no
// database server.
//
// Limits: one process, one writer. Every write is a BEGIN IMMEDIATE
// transaction on the store's single connection, so writes are serialized
// and a claim never races another; wake-ups (work ready, task finished,
// cancel requested) are announced in process (the store's [store.Listener])
// in place of PostgreSQL's NOTIFY. A second process on the same file would see the
// data but not the wake-ups, and would contend for the lock: run one. To
// grow beyond one node, move to PostgreSQL (see docs/internals/stores.md,
// "Embedded store").
//
// Its SQL lives in the embedded *.sql files beside the driver, as
// engine/pgstore's does: queries.sql, and claim.sql, diagnose.sql,
// schedule.sql and audit.sql for the larger features, each statement under
// a "-- name: NounVerb" line. They are parsed once when the store opens
// (a name defined twice fails the open) and run by name; nothing is
// concatenated at run time. An optional filter is a parameter of the one
// statement that turns it off (an empty string, NULL or a false "paged"
// flag); a list of values is one JSON array parameter read with
// json_each, so no statement's number of parameters depends on its input
// and a list of any length is one query. The column lists that scanTask
// and scanSchedule read in order are kept beside them in Go (taskColumns,
// scheduleColumns) and written into the statements at the markers
// /* TASK_COLUMNS */ and /* SCHEDULE_COLUMNS */ once, when the files are
// parsed.
//
// The same conformance suite (engine/storetest) runs against this store and
// engine/pgstore, and both are held to it. The store imports engine/store,
// engine/internal/plan (what both drivers do alike before they write),
// history and migrations, and never the engine root.
package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"maps"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/namedsql"
	"github.com/cairnflow/cairn/migrations"
)

// queryFiles holds every SQL statement the store runs: queries.sql and,
// for larger features, a file of their own (claim.sql, ...), all in the
// same "-- name:" format. A name defined twice is an error.
//
//go:embed *.sql
var queryFiles embed.FS

// Store is the embedded store. It is safe for concurrent use by the
// goroutines of one process.
type Store struct {
	db       *sql.DB
	path     string
	observer *store.ObserverSlot // Config.Metrics, or one attached later (ObserverAttach)
	// metrics is what the store counts its writes into: observer, or, in a
	// store bound to a transaction, observer's calls held until the commit.
	metrics store.Observer
	clock   store.Clock
	cache   *stmtCache // prepared statements of db's one connection
	// q runs the named queries: cache, or, in a store bound to a
	// transaction (see tx.go), the transaction.
	q      querier
	limits store.HistoryLimits // resolved: 0 is no bound
	hub    *hub                // the listeners of the store's announcements
	// cur is the transaction a store bound to one runs in (see tx.go);
	// nil on the store itself.
	cur *txState
}

// hub holds the listeners of a store's announcements.
type hub struct {
	mu        sync.Mutex
	listeners map[*func(store.Notification)]struct{}
}

var _ store.Store = (*Store)(nil)

// Config configures [New].
type Config struct {
	// Path is the SQLite file, created if missing. Required. ":memory:"
	// is a store that lives as long as the Store.
	Path string
	// Metrics, when set, counts the events the store writes
	// (engine.Metrics). Nil costs nothing.
	Metrics store.Observer
	// Clock tells the time of the events the store writes. Default
	// [store.WallClock].
	Clock store.Clock
	// HistoryLimits bound what signals may add to a task's history; the
	// zero value takes the defaults ([store.HistoryLimits]).
	HistoryLimits store.HistoryLimits
}

// Open opens (creating it if missing) the store in the SQLite file at path
// and applies its migrations: New with only a path.
func Open(ctx context.Context, path string) (*Store, error) {
	return New(ctx, Config{Path: path})
}

// New opens the store cfg describes and applies its migrations.
func New(ctx context.Context, cfg Config) (*Store, error) {
	path := cfg.Path
	if path == "" {
		return nil, errors.New("sqlitestore: a file path is required")
	}
	q := url.Values{}
	for _, p := range []string{
		"busy_timeout(10000)",
		// WAL: readers do not block the writer. synchronous FULL: a commit
		// (a task accepted, an outcome recorded) survives a power loss,
		// as PostgreSQL's commits do.
		"journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)",
	} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, errors.Wrapf(err, "open SQLite store %s", path)
	}
	// One connection: SQLite has one writer, and a single connection
	// serializes this process's transactions without SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	queries, err := loadQueries()
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	cache := &stmtCache{db: db, queries: queries, stmts: map[string]*sql.Stmt{}}
	slot := store.NewObserverSlot(cfg.Metrics)
	s := &Store{db: db, path: path, observer: slot, metrics: slot, clock: cfg.Clock, limits: cfg.HistoryLimits.Resolved(),
		cache: cache, q: cache, hub: &hub{listeners: map[*func(store.Notification)]struct{}{}}}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database file.
func (s *Store) Close() error { return s.db.Close() }

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Observer returns the observer the store counts its writes into
// (Config.Metrics, or one attached), or nil.
func (s *Store) Observer() store.Observer { return s.observer.Observer() }

// ObserverAttach implements [store.Store].
func (s *Store) ObserverAttach(o store.Observer) store.Observer { return s.observer.Attach(o) }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return errors.Wrap(s.db.PingContext(ctx), "ping SQLite store")
}

// migrate applies the pending migrations of migrations.SQLite, all in one
// transaction with their records: a file opened by an earlier release is
// upgraded wholly or not at all, and a new file pays one commit (one
// fsync), not one for each migration. A current file costs a count of
// its records and no write.
func (s *Store) migrate(ctx context.Context) error {
	all, err := migrations.SQLite()
	if err != nil {
		return err
	}
	if _, err := s.q.exec(ctx, "MigrationTableCreate"); err != nil {
		return errors.Wrap(err, "create schema_migrations")
	}
	// Versions run 1..n without gaps (the migrations package checks), so
	// n records up to version n are all of them; a newer release's
	// records above n do not count.
	var applied int
	if err := s.q.queryRow(ctx, "MigrationCount", len(all)).Scan(&applied); err != nil {
		return errors.Wrap(interpret(err), "read schema_migrations")
	}
	if applied >= len(all) {
		return nil
	}
	err = s.tx(ctx, func(tx *txn) error {
		for _, m := range all {
			// Another process may have applied it since the count was read.
			var n int
			if err := tx.queryRow(ctx, "MigrationApplied", m.Version).Scan(&n); err != nil {
				return errors.Wrap(err, "read schema_migrations")
			}
			if n > 0 {
				continue
			}
			if _, err := tx.tx.ExecContext(ctx, m.SQL); err != nil { // a script, not a named query: not for the cache
				return errors.Wrapf(err, "apply SQLite migration %04d_%s", m.Version, m.Name)
			}
			if _, err := tx.exec(ctx, "MigrationRecord", m.Version, m.Name, us(s.now())); err != nil {
				return errors.Wrapf(err, "apply SQLite migration %04d_%s", m.Version, m.Name)
			}
		}
		return nil
	})
	return errors.Wrapf(err, "migrate SQLite store %s", s.path)
}

// tx runs fn in a write transaction (BEGIN IMMEDIATE: the write lock is
// taken at the start, so what fn reads stays true until it commits); on a
// store bound to a transaction, in a savepoint of it, released when fn
// succeeds and rolled back to when it fails.
func (s *Store) tx(ctx context.Context, fn func(*txn) error) error {
	if s.cur != nil {
		return s.cur.inSavepoint(ctx, fn)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return interpret(err)
	}
	// Rolled back on every way out but a commit, a panic included: the
	// store's one connection must not stay in a transaction.
	defer func() { _ = tx.Rollback() }()
	t := &txn{tx: tx, cache: s.cache}
	if err := fn(t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return interpret(err)
	}
	s.prepareMissed(ctx, t)
	return nil
}

// prepareMissed prepares, once a transaction has ended and the connection
// is free again, what it ran unprepared, for the next one.
func (s *Store) prepareMissed(ctx context.Context, t *txn) {
	for _, q := range t.missed {
		s.cache.prepare(ctx, q)
	}
	t.missed = nil
}

// loadQueries parses every embedded query file and fills in the column
// markers.
// Parsed once: every store reads the same map, which nothing writes.
var loadQueries = sync.OnceValues(func() (map[string]string, error) {
	qs, err := namedsql.Load(queryFiles, "*.sql")
	if err != nil {
		return nil, err
	}
	return fillMarkers(qs)
})

// columnMarkers are the column lists written into the statements when
// they are parsed.
var columnMarkers = strings.NewReplacer("/* TASK_COLUMNS */", taskColumns, "/* TASK_COLUMNS_LEAN */", taskColumnsLean,
	"/* TASK_COLUMNS_PICKED */", taskColumnsPicked, "/* SCHEDULE_COLUMNS */", scheduleColumns)

// unknownMarker is a marker left after columnMarkers: a typo.
var unknownMarker = regexp.MustCompile(`/\* [A-Z_]+ \*/`)

// parseQueries reads one query file's text as loadQueries reads the
// embedded ones.
func parseQueries(src string) (map[string]string, error) {
	qs := map[string]string{}
	if err := namedsql.Parse(src, qs); err != nil {
		return nil, err
	}
	return fillMarkers(qs)
}

// fillMarkers fills in the column markers and drops each statement's
// closing semicolon; a marker left over is a typo.
func fillMarkers(qs map[string]string) (map[string]string, error) {
	variants := map[string]string{}
	for name, q := range qs {
		q = strings.TrimSuffix(strings.TrimSpace(columnMarkers.Replace(q)), ";")
		if strings.Contains(q, excludeMarker) {
			// Two statements: the claim's own, and its variant leaving the
			// tasks of TaskClaimParams.Exclude. A claim without exclusions
			// (all but a deploy check's skips) runs the first, whose
			// json_each of an empty array would cost every claim.
			variants[name+excludingSuffix] = strings.ReplaceAll(q, excludeMarker, excludeTest)
			q = strings.ReplaceAll(q, excludeMarker, "")
		}
		if m := unknownMarker.FindString(q); m != "" {
			return nil, errors.AssertionFailedf("query %s: unknown marker %s", name, m)
		}
		qs[name] = q
	}
	maps.Copy(qs, variants)
	return qs, nil
}

// stmtCache runs the named queries, each prepared once. Parsing SQL was
// most of the embedded store's CPU before it: database/sql over
// modernc.org/sqlite prepares on every call otherwise. Statements are
// cached by query name; there are as many as there are names.
//
// The store has one connection, so a statement is never prepared while a
// transaction holds it (that would wait for the connection forever):
// transactions use what is prepared, and note what is not, which the
// store prepares after the commit.
type stmtCache struct {
	db      *sql.DB
	queries map[string]string // by name; read only
	mu      sync.Mutex        // guards stmts only; never held while waiting for the connection
	stmts   map[string]*sql.Stmt
}

// text returns the named query; a missing name is a programming error.
func (c *stmtCache) text(name string) string {
	q, ok := c.queries[name]
	if !ok {
		panic("sqlitestore: unknown query " + name)
	}
	return q
}

func (c *stmtCache) lookup(name string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[name]
}

// prepare prepares the named query on the connection and caches it,
// unless it is cached already. It must not be called while this goroutine
// holds the connection in a transaction.
func (c *stmtCache) prepare(ctx context.Context, name string) *sql.Stmt {
	if st := c.lookup(name); st != nil {
		return st
	}
	st, err := c.db.PrepareContext(ctx, c.text(name))
	if err != nil {
		return nil // the caller runs it unprepared and reports the error
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.stmts[name]; ok {
		_ = st.Close()
		return prev
	}
	c.stmts[name] = st
	return st
}

func (c *stmtCache) query(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	if st := c.prepare(ctx, name); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.db.QueryContext(ctx, c.text(name), args...)
}

func (c *stmtCache) queryRow(ctx context.Context, name string, args ...any) *sql.Row {
	if st := c.prepare(ctx, name); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.db.QueryRowContext(ctx, c.text(name), args...)
}

func (c *stmtCache) exec(ctx context.Context, name string, args ...any) (sql.Result, error) {
	if st := c.prepare(ctx, name); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.db.ExecContext(ctx, c.text(name), args...)
}

// txn is a write transaction that runs the named queries the cache holds
// prepared, and notes the others.
type txn struct {
	tx     *sql.Tx
	cache  *stmtCache
	missed []string // query names
}

func (t *txn) stmt(ctx context.Context, name string) *sql.Stmt {
	st := t.cache.lookup(name)
	if st == nil {
		t.missed = append(t.missed, name)
		return nil
	}
	return t.tx.StmtContext(ctx, st)
}

func (t *txn) query(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	if st := t.stmt(ctx, name); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, t.cache.text(name), args...)
}

func (t *txn) queryRow(ctx context.Context, name string, args ...any) *sql.Row {
	if st := t.stmt(ctx, name); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, t.cache.text(name), args...)
}

func (t *txn) exec(ctx context.Context, name string, args ...any) (sql.Result, error) {
	if st := t.stmt(ctx, name); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, t.cache.text(name), args...)
}

// subscribe has fn hear of every commit that makes work ready, finishes
// tasks or requests cancels, until stop is called. fn runs on the
// committing goroutine and must return quickly.
func (s *Store) subscribe(fn func(store.Notification)) (stop func()) {
	h, key := s.hub, &fn
	h.mu.Lock()
	h.listeners[key] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.listeners, key)
		h.mu.Unlock()
	}
}

// announce tells the listeners of a commit's wake-ups: at once on the
// store itself, which announces after its own commits; in a transaction,
// after the outermost commit (never, if it rolls back).
func (s *Store) announce(a store.Notification) {
	if !a.Ready && len(a.Done) == 0 && len(a.Cancel) == 0 && len(a.Streams) == 0 && !a.Inquiries && len(a.Answered) == 0 && len(a.Models) == 0 && len(a.Remote) == 0 {
		return
	}
	if s.cur != nil {
		s.cur.after.Do(func() { s.hub.announce(a) })
		return
	}
	s.hub.announce(a)
}

func (h *hub) announce(a store.Notification) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for fn := range h.listeners {
		(*fn)(a)
	}
}

// interpret marks SQLite's errors the way the engine's callers expect.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		// The driver's "no rows in result set" is its own words; the caller's
		// wrapping says what was not found.
		return errors.WithStack(store.ErrNotFound)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch code := se.Code(); {
		case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE, code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return errmark.Mark(err, store.ErrConflict)
		case code&0xff == sqlite3.SQLITE_BUSY, code&0xff == sqlite3.SQLITE_LOCKED: // and their extended codes
			return errmark.Mark(err, store.ErrRetryable)
		}
	}
	return err
}

// Times are stored as microseconds since the Unix epoch, UTC.
func us(t time.Time) int64 { return t.UTC().UnixMicro() }

func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullUS(t *time.Time) sql.NullInt64 {
	if t == nil || t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: us(*t), Valid: true}
}

func nullTimeUS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: us(t), Valid: true}
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromUS(v.Int64)
	return &t
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// jsonIDs is ids as a JSON array of strings, the parameter of a
// json_each(?) list.
func jsonIDs(ids []uuid.UUID) string {
	b := make([]byte, 0, 2+39*len(ids))
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, id.String()...)
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// jsonStrings is ss as a JSON array, the parameter of a json_each(?) list.
// Only what JSON requires is escaped (quote, backslash, control
// characters); every other byte is passed as it is, so json_each gives
// back each string byte for byte, as a bound parameter would be.
func jsonStrings(ss []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			switch c := s[j]; {
			case c == '"', c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20:
				const hex = "0123456789abcdef"
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// DB returns the store's database handle, for tools that read the tables
// directly (the bench's observer). Its one connection is the store's:
// keep what is done with it short.
func (s *Store) DB() *sql.DB { return s.db }

// Version returns SQLite's version.
func (s *Store) Version(ctx context.Context) (string, error) {
	var v string
	err := s.q.queryRow(ctx, "SQLiteVersion").Scan(&v)
	return v, errors.Wrap(err, "read sqlite_version()")
}

// MigrationStatus lists every migration of migrations.SQLite with when it
// was applied to this file (all of them: Open applies what is pending).
func (s *Store) MigrationStatus(ctx context.Context) ([]store.MigrationState, error) {
	all, err := migrations.SQLite()
	if err != nil {
		return nil, err
	}
	out := make([]store.MigrationState, 0, len(all))
	for _, m := range all {
		st := store.MigrationState{Version: m.Version, Name: m.Name}
		var at int64
		err := s.q.queryRow(ctx, "MigrationAppliedAt", m.Version).Scan(&at)
		switch {
		case err == nil:
			t := fromUS(at)
			st.AppliedAt = &t
		case !errors.Is(err, sql.ErrNoRows):
			return nil, errors.Wrap(interpret(err), "read schema_migrations")
		}
		out = append(out, st)
	}
	return out, nil
}

// now reads the store's clock at the precision it stores.
func (s *Store) now() time.Time { return plan.Now(s.clock) }
