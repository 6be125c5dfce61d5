package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/migrations"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// pgBouncer is a PgBouncer of the test's own (Debian's pgbouncer package)
// in front of the test database's server, on a free loopback port.
type pgBouncer struct {
	port   int
	direct *url.URL // the test database's URL
}

// startPgBouncer starts PgBouncer in mode (transaction or session) with a
// server pool smaller than the clients', so that clients share server
// connections between transactions, as production poolers make them.
func startPgBouncer(t *testing.T, mode string) *pgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CAIRN_TEST_REQUIRE_DB") != "" {
			t.Fatalf("pgbouncer is not installed (apt-get install pgbouncer): the PgBouncer tests must run here")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer)")
	}
	direct, err := url.Parse(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	user := direct.User.Username()
	dir, err := os.MkdirTemp("", "cairn-pgbouncer-")
	require.NoError(t, err)
	b := &pgBouncer{port: freePort(t), direct: direct}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = 4
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, direct.Hostname(), direct.Port(), b.port, filepath.Join(dir, "users.txt"), mode,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(strconv.Quote(user)+` ""`+"\n"), 0o644))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	dieWithParent(cmd)
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		require.NoError(t, exec.Command("chown", "-R", "postgres", dir).Run())
		runAs(t, cmd, "postgres")
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "pgbouncer.log")); err == nil {
				t.Logf("pgbouncer.log:\n%s", lastLines(string(log), 40))
			}
		}
		_ = os.RemoveAll(dir)
	})
	waitFor(t, 10*time.Second, "pgbouncer to accept connections", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pool, err := pgstore.OpenPool(ctx, b.url(), pgstore.PoolOptions{MaxConns: 1, Pooler: pgstore.PoolerTransaction})
		if err != nil {
			return false
		}
		pool.Close()
		return true
	})
	return b
}

// url is the test database's URL through PgBouncer.
func (b *pgBouncer) url() string {
	u := *b.direct
	u.Host = fmt.Sprintf("127.0.0.1:%d", b.port)
	return u.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// transactionPool opens a pool through b as cairn's --pooler transaction
// does.
func (b *pgBouncer) transactionPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := pgstore.OpenPool(context.Background(), b.url(), pgstore.PoolOptions{MaxConns: maxConns, Pooler: pgstore.PoolerTransaction})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestPgBouncerTransactionModeMigrations: six processes migrating one
// schema at once through a transaction pooler all succeed, the schema is
// migrated once, and no server connection is left holding a lock (a
// session-level advisory lock stayed with an idle server connection and
// hung every later process).
func TestPgBouncerTransactionModeMigrations(t *testing.T) {
	t.Parallel()
	b := startPgBouncer(t, "transaction")
	bin := cairnBinary(t)
	schema := enginetest.UnmigratedSchema(t)
	var wg sync.WaitGroup
	outs := make([][]byte, 6)
	errs := make([]error, 6)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin, "migrate", "up", "--schema", schema, "--pooler", "transaction")
			cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+b.url())
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range outs {
		require.NoError(t, errs[i], "migrate up #%d: %s", i, outs[i])
	}
	all, err := migrations.All()
	require.NoError(t, err)
	direct := enginetest.Pool(t)
	var applied int
	require.NoError(t, direct.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&applied))
	require.Equal(t, len(all), applied)
	var idleHolders int
	require.NoError(t, direct.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks AS l
		JOIN pg_stat_activity AS a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND a.state = 'idle'`).Scan(&idleHolders))
	require.Zero(t, idleHolders, "an idle server connection holds an advisory lock")

	// A later process is not held up by anything the six left.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "migrate", "up", "--schema", schema, "--pooler", "transaction")
	cmd.Env = append(os.Environ(), "CAIRN_DATABASE_URL="+b.url())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "up to date")
}

// TestPgBouncerTransactionModeDemo runs the demo through a transaction
// pooler, its listener on the database itself.
func TestPgBouncerTransactionModeDemo(t *testing.T) {
	t.Parallel()
	b := startPgBouncer(t, "transaction")
	c := newCLI(t)
	c.url = b.url()
	c.env = []string{"CAIRN_POOLER=transaction", "CAIRN_LISTEN_DATABASE_URL=" + b.direct.String()}
	testDemoRunFinishesEveryTask(t, c)
}

// TestPgBouncerTransactionModeConformance runs the store conformance
// suite on stores whose pool goes through a transaction pooler (migrated
// through it too), their listeners on the database itself.
func TestPgBouncerTransactionModeConformance(t *testing.T) {
	b := startPgBouncer(t, "transaction")
	pool := b.transactionPool(t, 20)
	storetest.Run(t, func(t *testing.T) store.Store {
		schema := enginetest.UnmigratedSchema(t)
		_, err := pgstore.Migrate(context.Background(), pool, schema)
		require.NoError(t, err)
		s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema, ListenURL: b.direct.String()})
		require.NoError(t, err)
		return s
	})
}

// TestNotifierNoticesLostNotifications: a listener that LISTENs through a
// transaction pooler stays connected and hears nothing. The notifier's
// probe finds out and counts it (the test's own notifier, with short
// probes); the worker's notifier (default probes) finds out too, and its
// worker polls in its place, so a task is still run long before the
// worker's own (minute-long) poll.
func TestNotifierNoticesLostNotifications(t *testing.T) {
	t.Parallel()
	b := startPgBouncer(t, "transaction")
	pool := b.transactionPool(t, 8)
	schema := enginetest.UnmigratedSchema(t)
	_, err := pgstore.Migrate(context.Background(), pool, schema)
	require.NoError(t, err)
	s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema}) // no ListenURL: LISTEN goes through the pooler
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	metrics, err := sdk.NewMetrics(reg, nil)
	require.NoError(t, err)
	n := engine.NewNotifier(s, &engine.NotifierOpts{Logger: enginetest.Logger(t), Metrics: metrics,
		ProbeInterval: 500 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond})
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	waitFor(t, 15*time.Second, "the notifier to find notifications lost", func() bool { return n.Listening() && !n.Live() })
	require.GreaterOrEqual(t, metricValue(t, reg, "cairn_notification_probes_lost_total"), 1.0)
	require.Equal(t, 1.0, metricValue(t, reg, "cairn_notifiers_polling"))

	client, err := sdk.NewClient(sdk.ClientConfig{Store: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: s, PollInterval: time.Minute, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	echo := sdk.NewWorkflow("pgbouncer.echo", 1, func(ctx workflow.Context, in string) (string, error) { return in, nil }, nil)
	sdk.Register(w, echo)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { w.Stop(context.Background()) })
	// The worker's first claim comes before the task; after it, only
	// polling can find the task, and its own poll is a minute away.
	time.Sleep(time.Second)
	started, err := client.StartDynamic(context.Background(), echo, "hi", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := client.Wait(ctx, started.ID)
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, info.Status)
}

// metricValue is the value of the registered counter or gauge name (one
// series).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}
