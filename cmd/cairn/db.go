package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
)

const databaseHint = "set --database-url or CAIRN_DATABASE_URL to a reachable PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// connect opens a pool of maxConns connections (unless the URL sets
// pool_max_conns) and checks the database answers. Every failure is a
// configError with one line saying what to set.
func (g *globals) connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := g.poolConfig(maxConns)
	if err != nil {
		return nil, err
	}
	return g.open(ctx, cfg)
}

// poolConfig is the pool configuration of the database URL, with maxConns
// connections unless the URL sets pool_max_conns.
func (g *globals) poolConfig(maxConns int32) (*pgxpool.Config, error) {
	if g.url() == "" {
		return nil, errmark.Mark(errors.New("no database configured: "+databaseHint), configError)
	}
	if err := pgstore.ValidateSchemaName(g.schema); err != nil {
		return nil, errmark.Mark(err, configError)
	}
	pooler, err := pgstore.ParsePooler(g.pooler)
	if err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "--pooler"), configError)
	}
	cfg, err := pgstore.ParsePoolConfig(g.url(), pgstore.PoolOptions{MaxConns: maxConns, Pooler: pooler})
	if err != nil {
		return nil, errmark.Mark(errors.Newf("database URL does not parse (%s): %s", pgstore.ConnectFailure(err), g.hint()), configError)
	}
	return cfg, nil
}

// hint says what to check when the database does not answer: the flag,
// or with --placement the namespace's cell.
func (g *globals) hint() string {
	if g.placedCell != "" {
		return fmt.Sprintf("it is cell %q of the placement map (--placement %s): check that its database is up", g.placedCell, g.placement)
	}
	return databaseHint
}

// open opens a pool of cfg and checks the database answers.
func (g *globals) open(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgstore.NewPool(pingCtx, cfg)
	if err != nil {
		return nil, errmark.Mark(errors.Newf("%s: %s", err.Error(), g.hint()), configError)
	}
	return pool, nil
}

// storeOpts says how a command wants its store.
type storeOpts struct {
	// runsWorkers: the process runs workers or a server, so maxConns is
	// shared out by splitBudget (a listener, a reserved connection); else
	// it is the pool's size.
	runsWorkers bool
	// existing: the command reads or acts on what a store holds, so on
	// the embedded store it opens only a file that exists, and refuses
	// (naming the file it looked for) rather than create an empty one.
	existing bool
	maxConns int32        // the most connections the store opens, its listener's included (see splitBudget)
	migrate  bool         // apply PostgreSQL migrations (the embedded store always migrates)
	metrics  *sdk.Metrics // counts the events the store writes; nil: none
	// cellsDown, with --placement, opens the cells that do not answer
	// anyway (unmigrated), and warns of each there: a server restarted
	// while one cell is down serves the others. nil: every cell must
	// answer.
	cellsDown *slog.Logger
}

// embedded reports whether commands use the embedded store: no PostgreSQL
// URL is configured.
func (g *globals) embedded() bool { return g.url() == "" && g.placement == "" }

// defaultArchive is --default-archive as a location, else, with the embedded
// store, the directory <db>.archive beside its file (cairn dev's archive);
// with PostgreSQL and no --default-archive, none.
func (g *globals) defaultArchive() (string, error) {
	switch {
	case g.archive != "":
		return archiveLocation(g.archive)
	case g.embedded():
		return archiveLocation(g.dbPath + ".archive")
	}
	return "", nil
}

// archiveLocation takes a location as a user writes it: a URL, or a path
// to a directory (made absolute, so that the leader of another working
// directory finds it).
func archiveLocation(v string) (string, error) {
	if !strings.Contains(v, "://") {
		abs, err := filepath.Abs(v)
		if err != nil {
			return "", errmark.Mark(errors.Wrapf(err, "archive %q", v), configError)
		}
		v = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	if err := sdk.CheckArchive(v); err != nil {
		return "", errmark.Mark(err, configError)
	}
	return v, nil
}

// url is the PostgreSQL URL: --namespace's cell of --placement, else
// --database-url, else CAIRN_DATABASE_URL.
func (g *globals) url() string {
	if g.placed != "" {
		return g.placed
	}
	return g.databaseURL.get()
}

// everyCellAnnotation marks the commands that work in every cell of
// --placement (cairn server, cairn migrate up and status) rather than in
// --namespace's.
const everyCellAnnotation = "cairn/every-cell"

// noDatabaseAnnotation marks the commands (and groups) that open no
// database, which --placement leaves alone.
const noDatabaseAnnotation = "cairn/no-database"

// oneDatabaseAnnotation marks the commands that refuse --placement, with
// its value as the reason.
const oneDatabaseAnnotation = "cairn/one-database"

// cellOfArgAnnotation marks the commands whose first argument names the
// namespace they change (cairn namespace set NAME): its cell is the
// database, not --namespace's.
const cellOfArgAnnotation = "cairn/cell-of-arg"

// opensNoDatabase reports whether cmd, or a group above it, opens no
// database; cobra's own completion and help commands open none either.
func opensNoDatabase(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[noDatabaseAnnotation] != "" || c.Name() == "completion" || c.Name() == "help" {
			return true
		}
	}
	return false
}

// place reads --placement, if set, and finds the cell of --namespace (or
// of the namespace cmd's argument names) in it, unless cmd works in every
// cell or opens no database.
func (g *globals) place(cmd *cobra.Command, args []string) error {
	if g.placement == "" || opensNoDatabase(cmd) {
		return nil
	}
	if why := cmd.Annotations[oneDatabaseAnnotation]; why != "" {
		return errmark.Mark(errors.New("--placement: "+why), configError)
	}
	if g.databaseURL.get() != "" {
		return errmark.Mark(errors.New("--placement and --database-url (or CAIRN_DATABASE_URL) are both set: the placement map says which database holds the namespace; set one"), configError)
	}
	p, err := pgstore.LoadPlacement(g.placement)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--placement"), configError)
	}
	// A namespace no request could name is a mistake in the map.
	for _, ns := range slices.Sorted(maps.Keys(p.Namespaces)) {
		if err := sdk.ValidateName("namespace", ns); err != nil {
			return errmark.Mark(errors.Wrap(err, "--placement: placement map"), configError)
		}
	}
	if g.listenURL.get() != "" {
		return errmark.Mark(errors.New(`--listen-database-url (or CAIRN_LISTEN_DATABASE_URL) with --placement: give each cell its own "listen_url" in the placement map`), configError)
	}
	if cmd.Annotations[everyCellAnnotation] != "" {
		g.cells = p
		return nil
	}
	namespace := g.namespace
	if cmd.Annotations[cellOfArgAnnotation] != "" && len(args) > 0 {
		namespace = args[0]
	}
	name, cell, err := p.CellOf(namespace)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--placement"), configError)
	}
	g.placed, g.placedListen, g.placedCell = cell.URL, cell.ListenURL, name
	return nil
}

// listenDatabaseURL is the listener's own URL: --listen-database-url, or
// the listen_url of --namespace's cell (--placement refuses the flag);
// empty: the pool's.
func (g *globals) listenDatabaseURL() string {
	if v := g.listenURL.get(); v != "" {
		return v
	}
	return g.placedListen
}

// everyCell reports whether the command works in every cell of --placement.
func (g *globals) everyCell() bool { return g.cells != nil }

// openCells opens every cell of --placement as o says (each cell gets
// o.maxConns, shared out as one process's are), placed as the map says.
func (g *globals) openCells(ctx context.Context, o storeOpts) (*sdk.Cells, func(), error) {
	if err := pgstore.ValidateSchemaName(g.schema); err != nil {
		return nil, nil, errmark.Mark(err, configError)
	}
	pooler, err := pgstore.ParsePooler(g.pooler)
	if err != nil {
		return nil, nil, errmark.Mark(errors.Wrap(err, "--pooler"), configError)
	}
	budget := connBudget{pool: o.maxConns}
	if o.runsWorkers {
		budget = splitBudget(o.maxConns)
	}
	opened, err := pgstore.OpenCells(ctx, g.cells, pgstore.CellOptions{Schema: g.schema, Migrate: o.migrate, Metrics: o.metrics,
		Pool: pgstore.PoolOptions{MaxConns: budget.pool, Pooler: pooler}, ControlConns: budget.control,
		AllowUnreachable: o.cellsDown != nil})
	if err != nil {
		return nil, nil, errmark.Mark(errors.Wrap(err, "--placement"), configError)
	}
	cells, err := g.placeCells(opened, o)
	if err != nil {
		opened.Close()
		return nil, nil, err
	}
	return cells, opened.Close, nil
}

// placeCells warns of the cells that did not answer, checks --keys and
// --blob-store as g.store does, and places the cells as the map says.
func (g *globals) placeCells(opened *pgstore.CellStores, o storeOpts) (*sdk.Cells, error) {
	if err := warnCellsDown(opened, o.cellsDown, o.migrate); err != nil {
		return nil, err
	}
	if _, err := g.payloadStage(); err != nil {
		return nil, err
	}
	cells, err := sdk.NewCells(opened.Stores, g.cells.Namespaces)
	if err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "--placement"), configError)
	}
	return cells, nil
}

// warnCellsDown logs each cell that did not answer when opened, and
// refuses when none did: a process with no database at all is better
// stopped, as it is without --placement.
func warnCellsDown(opened *pgstore.CellStores, logger *slog.Logger, migrate bool) error {
	if len(opened.Unreachable) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(opened.Unreachable))
	if len(names) == len(opened.Stores) {
		failed := make([]string, len(names))
		for i, name := range names {
			failed[i] = fmt.Sprintf("cell %q: %s", name, opened.Unreachable[name])
		}
		return errmark.Mark(errors.Newf("--placement: no cell answers: %s", strings.Join(failed, "; ")), configError)
	}
	msg := "cell does not answer: its namespaces fail until it is back"
	if migrate {
		msg += " (not migrated: run cairn migrate up --placement then)"
	}
	for _, name := range names {
		logger.Warn(msg, "cell", name, slog.String("error", opened.Unreachable[name].Error()))
	}
	return nil
}

// store opens the configured store: PostgreSQL when a database URL is set,
// else the embedded SQLite store in --db (created if missing). It checks
// --keys and --blob-store too, which the clients, workers and servers
// over it take (g.payloadStage).
func (g *globals) store(ctx context.Context, o storeOpts) (store.Store, func(), error) {
	s, closeStore, err := g.driver(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	if _, err := g.payloadStage(); err != nil {
		closeStore()
		return nil, nil, err
	}
	return s, closeStore, nil
}

// payloadStage is what --keys and --blob-store configure: the keys of the
// namespaces encrypted at rest and where blobs keep their bytes, given to
// every client, worker and server the command makes. They are read once.
func (g *globals) payloadStage() (payloadStage, error) {
	if g.stage != nil {
		return *g.stage, nil
	}
	keys, err := g.readKeys()
	if err != nil {
		return payloadStage{}, err
	}
	st := payloadStage{keys: keys}
	if g.blobStore != "" {
		if st.blobStore, err = archiveLocation(g.blobStore); err != nil {
			return payloadStage{}, errors.Wrap(err, "--blob-store")
		}
	}
	g.stage = &st
	return st, nil
}

// payloadStage is what [globals.payloadStage] reads.
type payloadStage struct {
	keys      *seal.Keys
	blobStore string // a location; "": the database
}

// readKeys reads --keys's keys (or CAIRN_KEYS's), nil when neither is
// set.
func (g *globals) readKeys() (*seal.Keys, error) {
	var keys *seal.Keys
	var err error
	switch {
	case g.keys != "":
		keys, err = seal.LoadKeys(g.keys)
	default:
		keys, err = seal.KeysFromEnv()
	}
	if err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "--keys"), configError)
	}
	return keys, nil
}

// driver opens the configured store's driver.
func (g *globals) driver(ctx context.Context, o storeOpts) (store.Store, func(), error) {
	if g.embedded() {
		_, statErr := os.Stat(g.dbPath)
		if o.existing && errors.Is(statErr, os.ErrNotExist) {
			return nil, nil, errmark.Mark(noEmbeddedStore(g.dbPath), configError)
		}
		s, err := sqlitestore.New(ctx, sqlitestore.Config{Path: g.dbPath, Metrics: o.metrics})
		if err != nil {
			return nil, nil, errmark.Mark(errors.Wrapf(err, "--db %s (or set --database-url to use PostgreSQL)", g.dbPath), configError)
		}
		if errors.Is(statErr, os.ErrNotExist) {
			// Not quietly: a user who meant PostgreSQL and forgot the URL
			// sees where the work went.
			fmt.Fprintf(os.Stderr, "cairn: no database URL set (--database-url, CAIRN_DATABASE_URL): created the embedded store %s\n", g.dbPath)
		}
		return s, func() { _ = s.Close() }, nil
	}
	budget := connBudget{pool: o.maxConns}
	if o.runsWorkers {
		budget = splitBudget(o.maxConns)
	}
	pool, err := g.connect(ctx, budget.pool)
	if err != nil {
		return nil, nil, err
	}
	closeAll := pool.Close
	var control *pgxpool.Pool
	if budget.control > 0 {
		cfg := pool.Config()
		cfg.MaxConns = budget.control // whatever pool_max_conns says: it sizes the pool
		if control, err = g.open(ctx, cfg); err != nil {
			pool.Close()
			return nil, nil, err
		}
		closeAll = func() { control.Close(); pool.Close() }
	}
	if o.migrate {
		if _, err := pgstore.Migrate(ctx, pool, g.schema); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	s, err := pgstore.New(pgstore.Config{Pool: pool, ControlPool: control, Schema: g.schema, Metrics: o.metrics, ListenURL: g.listenDatabaseURL()})
	if err != nil {
		closeAll()
		if g.listenDatabaseURL() != "" {
			err = errors.Wrap(err, "--listen-database-url")
		}
		return nil, nil, errmark.Mark(err, configError)
	}
	return s, closeAll, nil
}

// maxConnsHelp is --max-conns's help, for the commands that run workers.
const maxConnsHelp = "the most connections this process opens to PostgreSQL: one listens for wake-ups, one carries heartbeats and leadership, the rest claims, appends and requests; pool_max_conns in --database-url sets the last part instead"

// defaultServerConns is cairn server's --max-conns.
const defaultServerConns = 20

// workerConns is a worker process's connections unless --max-conns says:
// the sizing rule of docs/deployment.md. Steps' appends are
// committed in batches and claims take many tasks at once, so connections
// grow with concurrency far slower than slots do.
func workerConns(concurrency int) int {
	return min(4+concurrency/16, 20)
}

// connBudget is how a process's connections are shared out.
type connBudget struct {
	pool    int32 // claims, appends, requests
	control int32 // heartbeats and leadership (0: they use pool)
}

// splitBudget shares out the --max-conns of a process that runs workers or
// a server: one connection is the listener's, one carries heartbeats and
// leadership attempts so that claims and appends cannot make them late,
// and the rest form the pool. Below three there is nothing to reserve: the
// listener and a pool of the rest.
func splitBudget(maxConns int32) connBudget {
	if maxConns < 3 {
		return connBudget{pool: max(maxConns-1, 1)}
	}
	return connBudget{pool: maxConns - 2, control: 1}
}

// client opens the configured store, which must exist (see
// storeOpts.existing), and returns an sdk client over it.
func (g *globals) client(ctx context.Context) (*sdk.Client, func(), error) {
	return g.clientWith(ctx, storeOpts{maxConns: 4, existing: true})
}

// clientCreating is client for a command that writes something new (a
// start, a setting, a schedule): it creates the embedded store if missing.
func (g *globals) clientCreating(ctx context.Context) (*sdk.Client, func(), error) {
	return g.clientWith(ctx, storeOpts{maxConns: 4})
}

// noEmbeddedStore is the error of a command that needs an existing
// embedded store when path holds none.
func noEmbeddedStore(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return errors.Newf("no embedded store at %s (--db, env CAIRN_DB; no --database-url set): this command reads a store and creates none; "+
		"run it where the store is, pass --db PATH, or set --database-url for PostgreSQL", abs)
}

func (g *globals) clientWith(ctx context.Context, o storeOpts) (*sdk.Client, func(), error) {
	c, _, closeAll, err := g.clientAndStore(ctx, o)
	return c, closeAll, err
}

// clientAndStore is clientWith, returning too the store the client works
// in, for a worker beside the client (cairn demo).
func (g *globals) clientAndStore(ctx context.Context, o storeOpts) (*sdk.Client, store.Store, func(), error) {
	store, closeStore, err := g.store(ctx, o)
	if err != nil {
		return nil, nil, nil, err
	}
	archive, err := g.defaultArchive()
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	stage, _ := g.payloadStage() // g.store read it
	c, err := sdk.NewClient(sdk.ClientConfig{Store: store, Namespace: g.namespace, Identity: cliIdentity(), FilterLimits: g.filters,
		MaxPayloadBytes: g.maxPayload, DefaultArchive: archive, Keys: stage.keys, BlobStore: stage.blobStore})
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	return c, store, func() { c.Close(); closeStore() }, nil
}

// cliIdentity names the person at the terminal in the histories of tasks
// the CLI acts on: "cli:<user>@<host>".
func cliIdentity() string {
	who := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + who + "@" + host
}
