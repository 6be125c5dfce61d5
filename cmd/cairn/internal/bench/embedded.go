package bench

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// Without a database URL, `cairn bench throughput`, `workflow`, `latency`
// and `replay` run on the embedded store: a new SQLite file in the
// temporary directory for each run, removed after it. The other modes
// measure PostgreSQL things (worker processes, the audit index) and need it.

// openEmbeddedBench opens a fresh embedded store for a drain mode.
func openEmbeddedBench(ctx context.Context, cfg Config, mode string) (*benchEnv, func(), error) {
	if mode != "throughput" && mode != "workflow" && mode != "latency" && mode != "replay" && mode != "children" {
		return nil, nil, errmark.Mark(errors.Newf("bench %s needs PostgreSQL: set --database-url (throughput, workflow, latency, replay and children also run on the embedded store)", mode), ErrConfig)
	}
	queries, err := liteQueries()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return nil, nil, errors.Wrap(err, "make the bench's directory")
	}
	path := filepath.Join(dir, "cairn-bench.db")
	store, err := sqlitestore.Open(ctx, path)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	closeAll := func() { _ = store.Close(); _ = os.RemoveAll(dir) }
	version, err := store.Version(ctx)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	env := &benchEnv{cfg: cfg, lite: store, liteQueries: queries, progress: cfg.Stderr, header: benchHeader{
		Mode: mode, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		SQLiteVersion: version, SQLiteFile: path, Namespace: cfg.Namespace, StartedAt: time.Now().UTC(),
	}}
	if cfg.JSON {
		env.progress = io.Discard
	}
	return env, closeAll, nil
}

// clientConfig is the configuration of a client on the bench's database.
func (e *benchEnv) clientConfig() sdk.ClientConfig {
	if e.lite != nil {
		return sdk.ClientConfig{Store: e.lite, Namespace: e.cfg.Namespace, Keys: e.cfg.Keys}
	}
	return sdk.ClientConfig{Pool: e.obs.pool, Schema: e.cfg.Schema, ListenURL: e.cfg.ListenURL, Namespace: e.cfg.Namespace, Keys: e.cfg.Keys}
}

// workerStore is the store the bench writes in where it acts below the
// client (replay claims its tasks and appends their events itself), and
// reads back from as stored: the driver the client works in.
func (e *benchEnv) workerStore() (store.Store, error) {
	if e.lite != nil {
		return e.lite, nil
	}
	return pgstore.New(pgstore.Config{Pool: e.obs.pool, Schema: e.cfg.Schema})
}

// clientConfig is the configuration of a client on t.
func (t benchTarget) clientConfig(cfg Config) sdk.ClientConfig {
	return sdk.ClientConfig{Pool: t.pool, Store: t.store(), Schema: cfg.Schema, ListenURL: cfg.ListenURL, Namespace: cfg.Namespace, Keys: cfg.Keys}
}

// target opens what the workers use: a pool of maxConns on PostgreSQL, the
// store itself on SQLite.
func (e *benchEnv) target(ctx context.Context, maxConns int) (benchTarget, func(), error) {
	if e.lite != nil {
		return benchTarget{lite: e.lite}, func() {}, nil
	}
	pool, err := e.workerPool(ctx, maxConns)
	if err != nil {
		return benchTarget{}, nil, err
	}
	return benchTarget{pool: pool}, pool.Close, nil
}

// analyze refreshes the planner's statistics after the insert.
func (e *benchEnv) analyze(ctx context.Context) error {
	if e.lite != nil {
		_, err := e.lite.DB().ExecContext(ctx, query(e.liteQueries, "TablesAnalyze"))
		return errors.Wrap(err, "analyze bench tables")
	}
	return e.obs.analyze(ctx)
}

// prefillFinished puts n finished ballast tasks in (PostgreSQL only).
func (e *benchEnv) prefillFinished(ctx context.Context, n int) error {
	if e.lite != nil {
		return errmark.Mark(errors.New("--finished needs PostgreSQL"), ErrConfig)
	}
	return e.obs.prefillFinished(ctx, n)
}

// drainPoll is how a drain asks whether work is left.
type drainPoll interface {
	anyUnfinished(ctx context.Context) (bool, error)
	unfinished(ctx context.Context) (int, error)
}

// doneCounter is a drain poll that can also count finished tasks by the
// store's done notifications (PostgreSQL's).
type doneCounter interface {
	// listenDone starts listening, before the workers start.
	listenDone(ctx context.Context) error
	// waitDone waits up to d for done notifications and returns how many
	// task ids those that came named (0 when none came).
	waitDone(ctx context.Context, d time.Duration) (int, error)
}

// openPoll opens the drain's poll: its own connection on PostgreSQL.
func (e *benchEnv) openPoll(ctx context.Context) (drainPoll, func(), error) {
	if e.lite != nil {
		return litePoll{e.lite.DB(), e.liteQueries}, func() {}, nil
	}
	conn, err := e.obs.pollConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return pgPoll{e.obs, conn}, func() { _ = conn.Close(context.WithoutCancel(ctx)) }, nil
}

type pgPoll struct {
	obs  *benchSQL
	conn *pgx.Conn
}

func (p pgPoll) anyUnfinished(ctx context.Context) (bool, error) {
	return p.obs.anyUnfinished(ctx, p.conn)
}
func (p pgPoll) unfinished(ctx context.Context) (int, error) { return p.obs.unfinished(ctx, p.conn) }

func (p pgPoll) listenDone(ctx context.Context) error {
	_, err := p.conn.Exec(ctx, "LISTEN "+pgx.Identifier{p.obs.schema + ".done"}.Sanitize())
	return errors.Wrap(err, "listen for finished tasks")
}

func (p pgPoll) waitDone(ctx context.Context, d time.Duration) (int, error) {
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n, err := p.conn.WaitForNotification(waitCtx)
	switch {
	case err == nil:
		// The payload is the ids, comma-separated.
		return strings.Count(n.Payload, ",") + 1, nil
	case ctx.Err() == nil && waitCtx.Err() != nil:
		return 0, nil
	default:
		return 0, errors.Wrap(err, "wait for finished tasks")
	}
}

type litePoll struct {
	db      *sql.DB
	queries map[string]string // of sqlite.sql
}

func (p litePoll) anyUnfinished(ctx context.Context) (bool, error) {
	var found bool
	err := p.db.QueryRowContext(ctx, query(p.queries, "TaskUnfinishedExists")).Scan(&found)
	return found, errors.Wrap(err, "look for unfinished tasks")
}

func (p litePoll) unfinished(ctx context.Context) (int, error) {
	var n int
	err := p.db.QueryRowContext(ctx, query(p.queries, "TaskUnfinishedCount")).Scan(&n)
	return n, errors.Wrap(err, "count unfinished tasks")
}

// summary is the database's account of a drain.
func (e *benchEnv) summary(ctx context.Context) (drainSummary, error) {
	if e.lite == nil {
		return e.obs.drainSummary(ctx)
	}
	var s drainSummary
	var last sql.NullInt64
	err := e.lite.DB().QueryRowContext(ctx, query(e.liteQueries, "DrainSummary")).Scan(&s.completed, &s.otherTerminal, &last, &s.events)
	if last.Valid {
		t := time.UnixMicro(last.Int64).UTC()
		s.lastFinished = &t
	}
	return s, errors.Wrap(err, "summarize drain")
}
