package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestParsePoolConfig: cairn's defaults apply only where the connection
// string is silent; an operator's pool_* and exec mode settings win.
func TestParsePoolConfig(t *testing.T) {
	t.Parallel()
	const base = "postgres://u@127.0.0.1:5432/db"
	cfg, err := pgstore.ParsePoolConfig(base, pgstore.PoolOptions{MaxConns: 3})
	require.NoError(t, err)
	require.EqualValues(t, 3, cfg.MaxConns)
	require.Equal(t, pgstore.DefaultMaxConnIdleTime, cfg.MaxConnIdleTime)
	require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.ConnConfig.DefaultQueryExecMode)
	require.Equal(t, pgstore.DefaultConnectTimeout, cfg.ConnConfig.ConnectTimeout)
	cfg, err = pgstore.ParsePoolConfig(base+"?connect_timeout=3", pgstore.PoolOptions{})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, cfg.ConnConfig.ConnectTimeout, "the URL's connect_timeout wins")

	cfg, err = pgstore.ParsePoolConfig(base+"?pool_max_conns=7&pool_max_conn_idle_time=10s", pgstore.PoolOptions{MaxConns: 3})
	require.NoError(t, err)
	require.EqualValues(t, 7, cfg.MaxConns, "the URL's pool_max_conns wins")
	require.Equal(t, 10*time.Second, cfg.MaxConnIdleTime)

	cfg, err = pgstore.ParsePoolConfig("host=127.0.0.1 user=u dbname=db pool_max_conns=5", pgstore.PoolOptions{MaxConns: 3, Pooler: pgstore.PoolerTransaction})
	require.NoError(t, err)
	require.EqualValues(t, 5, cfg.MaxConns, "a keyword/value string's pool_max_conns wins")
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode, "a transaction pooler needs unnamed statements")

	cfg, err = pgstore.ParsePoolConfig("host=127.0.0.1 password='a b=c' pool_max_conns = 6 dbname=db", pgstore.PoolOptions{MaxConns: 3})
	require.NoError(t, err)
	require.EqualValues(t, 6, cfg.MaxConns, "spaces around '=' are allowed")
	require.Equal(t, "a b=c", cfg.ConnConfig.Password)

	cfg, err = pgstore.ParsePoolConfig(base+"?default_query_exec_mode=exec", pgstore.PoolOptions{Pooler: pgstore.PoolerTransaction})
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeExec, cfg.ConnConfig.DefaultQueryExecMode, "the URL's exec mode wins")

	_, err = pgstore.ParsePoolConfig(base, pgstore.PoolOptions{Pooler: "statement"})
	require.ErrorContains(t, err, `pooler "statement": use none, session or transaction`)
}

// TestOpenPoolNamesEveryHost: a multi-host URL's failure says, for each
// host, why it refused (the first host's name on the second's reason was
// what an outage looked like).
func TestOpenPoolNamesEveryHost(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	live, err := url.Parse(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	u := *live
	u.Host = closed + "," + live.Host
	q := u.Query()
	q.Set("target_session_attrs", "standby") // the test server is a primary: it refuses too
	q.Set("connect_timeout", "5")
	q.Set("sslmode", "prefer") // each address tried twice, with TLS and without
	u.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = pgstore.OpenPool(ctx, u.String(), pgstore.PoolOptions{MaxConns: 1})
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, fmt.Sprintf("cannot reach the database at %s, %s", closed, live.Host))
	require.Equal(t, 1, strings.Count(msg, closed+": "), "each reason named once: %s", msg)
	require.Contains(t, msg, "connection refused")
	require.Contains(t, msg, live.Host+": ")
	require.Contains(t, msg, "standby")
}

// TestSilentHostFailsInSeconds: a host that accepts connections and never
// answers (a cell cut off behind a proxy, a hung server) fails a pool's
// connect after DefaultConnectTimeout, even under a context without a
// deadline: without it, every request waited for the OS, or forever.
func TestSilentHostFailsInSeconds(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer func() { _ = conn.Close() }() // held open, never answered
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := pgstore.OpenPool(context.Background(), "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable", pgstore.PoolOptions{MaxConns: 1})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "cannot reach the database at "+ln.Addr().String())
	case <-time.After(3 * pgstore.DefaultConnectTimeout):
		t.Fatal("a silent host held the connect past three connect timeouts")
	}
}

// An error from a pool whose hosts all refuse it is one line (pgconn
// writes a line per host, each twice with sslmode=prefer), names each host
// once, and is still ErrUnavailable.
func TestConnectionErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := unusedPort(t), unusedPort(t)
	pool, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?target_session_attrs=read-write&connect_timeout=2", a, b))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pgstore.Config{Pool: pool})
	require.NoError(t, err)
	for name, call := range map[string]func() error{
		"ping":       func() error { return s.Ping(ctx) },
		"namespaces": func() error { _, err := s.NamespaceList(ctx, &store.NamespaceListParams{}); return err },
	} {
		err := call()
		require.Error(t, err, name)
		msg := err.Error()
		require.NotContains(t, msg, "\n", "%s: %q", name, msg)
		for _, port := range []int{a, b} {
			require.Equal(t, 1, strings.Count(msg, fmt.Sprintf("127.0.0.1:%d (", port)), "%s names each host once: %q", name, msg)
		}
		require.ErrorIs(t, err, store.ErrUnavailable, name)
		require.True(t, strings.HasPrefix(fmt.Sprintf("%v", err), msg), "%%v is Error()")
	}
}

// unusedPort returns a loopback port nothing listens on.
func unusedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}
