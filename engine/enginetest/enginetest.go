// Package enginetest provides PostgreSQL for tests: a database URL, a
// shared pool per test binary, a fresh migrated schema per test, and the
// check every integration test ends with, that each task's projection row
// equals the replay of its events. It also makes fresh embedded stores'
// files, copied from one migrated once per test binary.
//
// The database comes from CAIRN_TEST_DATABASE_URL. Without it, a PostgreSQL
// container is started through testcontainers-go when Docker is reachable;
// otherwise tests skip with a message saying how to run them, unless
// CAIRN_TEST_REQUIRE_DB is set (as CI sets it), in which case they fail.
//
// Non-test code never imports this package.
package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"
)

var (
	urlOnce sync.Once
	dbURL   string
	dbErr   string

	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// DatabaseURL returns the URL of the test database, starting a container if
// needed, or skips (fails under CAIRN_TEST_REQUIRE_DB) when there is none.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	urlOnce.Do(func() {
		if u := os.Getenv("CAIRN_TEST_DATABASE_URL"); u != "" {
			dbURL = u
			return
		}
		dbURL, dbErr = startContainer()
	})
	if dbURL == "" {
		msg := "no test database: set CAIRN_TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) or make Docker reachable for testcontainers-go (" + dbErr + ")"
		if os.Getenv("CAIRN_TEST_REQUIRE_DB") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return dbURL
}

func startContainer() (string, string) {
	if _, err := testcontainers.NewDockerProvider(); err != nil {
		return "", "docker not reachable: " + err.Error()
	}
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("test"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(60*time.Second)))
	if err != nil {
		return "", "start postgres container: " + err.Error()
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", "container connection string: " + err.Error()
	}
	return u, ""
}

// Pool returns a pool on the test database shared by the whole test binary.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	u := DatabaseURL(tb)
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 20
		pool, poolErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	require.NoError(tb, poolErr)
	return pool
}

// Schema creates a fresh schema with cairn's migrations applied, dropped
// when the test ends, and returns its name.
func Schema(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "cairn_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	_, err := pgstore.Migrate(ctx, p, name)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := p.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			tb.Logf("drop test schema %s: %v", name, err)
		}
	})
	return name
}

// Store returns a store over a fresh schema (see [Schema]).
func Store(tb testing.TB) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.New(pgstore.Config{Pool: Pool(tb), Schema: Schema(tb)})
	require.NoError(tb, err)
	return s
}

// RequireProjectionsMatch checks the invariant of DESIGN.md for every task
// in the store's schema: Replay(events) equals the projection row. It
// returns the number of tasks checked.
func RequireProjectionsMatch(tb testing.TB, s store.Store) int {
	tb.Helper()
	ctx := context.Background()
	ids := TaskIDs(tb, s)
	const chunk = 500
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: part})
		require.NoError(tb, err)
		events, err := s.EventList(ctx, store.EventListAll("", part...))
		require.NoError(tb, err)
		for _, t := range tasks {
			state, err := history.Replay(events[t.ID])
			require.NoError(tb, err, "replay task %s", t.ID)
			require.Empty(tb, ProjectionDiff(t, state), "task %s: projection differs from replay", t.ID)
		}
	}
	return len(ids)
}

// LeakOptions are the goroutines goleak should not count as leaks in a
// test binary that uses this package: the shared test pool (and its
// connections) lives as long as the binary, and testcontainers (used when no CAIRN_TEST_DATABASE_URL
// is set) keeps its reaper and Docker client connections open.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		// A pooled connection that once read in the background (a large
		// write) keeps that reader parked until its next message: it ends
		// with the connection, which the shared pool keeps.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}
