package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

const databaseHint = "set --database-url or CAIRN_DATABASE_URL to a reachable PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// connect opens a pool and checks the database answers. Every failure is a
// configError with one line saying what to set.
func (g *globals) connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if g.url() == "" {
		return nil, errmark.Mark(errors.New("no database configured: "+databaseHint), configError)
	}
	if err := pgstore.ValidateSchemaName(g.schema); err != nil {
		return nil, errmark.Mark(err, configError)
	}
	cfg, err := pgxpool.ParseConfig(g.url())
	if err != nil {
		return nil, errmark.Mark(errors.Newf("database URL does not parse (%s): %s", redactedCause(err), databaseHint), configError)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errmark.Mark(errors.Newf("cannot open database: %s", databaseHint), configError)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, errmark.Mark(errors.Newf("cannot reach the database at %s:%d (%s): %s",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, redactedCause(err), databaseHint), configError)
	}
	return pool, nil
}

// redactedCause shortens a connection error to its last part, which names
// the cause without repeating the URL (and its password).
func redactedCause(err error) string {
	msg := err.Error()
	for i := len(msg) - 2; i > 0; i-- {
		if msg[i] == ':' && msg[i+1] == ' ' {
			return msg[i+2:]
		}
	}
	return msg
}

// storeOpts says how a command wants its store.
type storeOpts struct {
	maxConns int32           // PostgreSQL pool size
	migrate  bool            // apply PostgreSQL migrations (the embedded store always migrates)
	metrics  *engine.Metrics // counts the events the store writes; nil: none
}

// embedded reports whether commands use the embedded store: no PostgreSQL
// URL is configured.
func (g *globals) embedded() bool { return g.url() == "" }

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
	if err := engine.CheckArchive(v); err != nil {
		return "", errmark.Mark(err, configError)
	}
	return v, nil
}

// url is the PostgreSQL URL: --database-url, else CAIRN_DATABASE_URL.
func (g *globals) url() string { return g.databaseURL.get() }

// store opens the configured store: PostgreSQL when a database URL is set,
// else the embedded SQLite store in --db (created if missing).
func (g *globals) store(ctx context.Context, o storeOpts) (store.Store, func(), error) {
	codec, err := g.codec()
	if err != nil {
		return nil, nil, err
	}
	location := ""
	if g.blobStore != "" {
		if location, err = archiveLocation(g.blobStore); err != nil {
			return nil, nil, errors.Wrap(err, "--blob-store")
		}
	}
	s, closeStore, err := g.driver(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	blobs, err := engine.BlobStoreOver(s, location, nil)
	if err != nil {
		closeStore()
		return nil, nil, errmark.Mark(errors.Wrap(err, "--blob-store"), configError)
	}
	return engine.SealStore(blobs, codec), closeStore, nil
}

// codec is --keys's codec (or CAIRN_KEYS's), nil when neither is set.
func (g *globals) codec() (*engine.Codec, error) {
	var codec *engine.Codec
	var err error
	switch {
	case g.keys != "":
		codec, err = engine.LoadCodec(g.keys)
	default:
		codec, err = engine.CodecFromEnv()
	}
	if err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "--keys"), configError)
	}
	return codec, nil
}

// driver opens the configured store's driver, without the decorators.
func (g *globals) driver(ctx context.Context, o storeOpts) (store.Store, func(), error) {
	if g.embedded() {
		_, statErr := os.Stat(g.dbPath)
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
	pool, err := g.connect(ctx, o.maxConns)
	if err != nil {
		return nil, nil, err
	}
	if o.migrate {
		if _, err := pgstore.Migrate(ctx, pool, g.schema); err != nil {
			pool.Close()
			return nil, nil, err
		}
	}
	s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: g.schema, Metrics: o.metrics})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, pool.Close, nil
}

// client opens the configured store and returns an sdk client over it.
func (g *globals) client(ctx context.Context) (*sdk.Client, func(), error) {
	return g.clientWith(ctx, storeOpts{maxConns: 4})
}

func (g *globals) clientWith(ctx context.Context, o storeOpts) (*sdk.Client, func(), error) {
	store, closeStore, err := g.store(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	archive, err := g.defaultArchive()
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	c, err := sdk.NewClient(sdk.ClientConfig{Store: store, Namespace: g.namespace, Identity: cliIdentity(), FilterLimits: g.filters,
		MaxPayloadBytes: g.maxPayload, DefaultArchive: archive})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return c, func() { c.Close(); closeStore() }, nil
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
