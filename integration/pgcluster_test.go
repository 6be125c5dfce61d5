package integration_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgCluster is a PostgreSQL server of the test's own, in a temporary data
// directory, so a test can crash and restart it without disturbing the
// shared test database.
type pgCluster struct {
	bin, dir string
	port     int
	settings []string // more -c settings of the server
}

// startCluster initializes and starts a private cluster on a free port.
// It needs the PostgreSQL server binaries (Debian's postgresql package);
// as root it runs them as the postgres user, as initdb requires.
func startCluster(t *testing.T, settings ...string) *pgCluster {
	t.Helper()
	c := newCluster(t, settings)
	require.NoError(t, c.run("initdb", "-D", c.dir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"))
	require.NoError(t, c.start())
	return c
}

// newCluster makes the data directory of a cluster not yet initialized,
// removed (its server stopped) when the test ends.
func newCluster(t *testing.T, settings []string) *pgCluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	require.NotEmpty(t, bins, "this test runs its own PostgreSQL: install the postgresql server package")
	sort.Strings(bins)
	c := &pgCluster{bin: filepath.Dir(bins[len(bins)-1]), port: freePort(t), settings: settings}
	c.removeStale()
	dir, err := os.MkdirTemp("", "cairn-chaos-pg-")
	require.NoError(t, err)
	c.dir = dir
	t.Cleanup(func() {
		_ = c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "stop")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		require.NoError(t, exec.Command("chown", "postgres:postgres", dir).Run())
	}
	return c
}

// startStandby copies c with pg_basebackup into a cluster of its own that
// streams c's WAL (a hot standby), and starts it.
func (c *pgCluster) startStandby(t *testing.T) *pgCluster {
	t.Helper()
	s := newCluster(t, c.settings)
	require.NoError(t, os.Chmod(s.dir, 0o700))
	require.NoError(t, s.run("pg_basebackup", "-D", s.dir, "-h", "127.0.0.1", "-p", fmt.Sprint(c.port), "-U", "postgres",
		"-R", "-X", "stream", "--no-sync", "-c", "fast"))
	require.NoError(t, s.start())
	return s
}

// promote makes a standby the primary, and waits until it is.
func (c *pgCluster) promote() error { return c.run("pg_ctl", "-D", c.dir, "-w", "promote") }

// removeStale stops and removes clusters left by a test binary that was
// killed before its cleanup ran (a timeout): older than an hour, no test
// still uses them.
func (c *pgCluster) removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "cairn-chaos-pg-*"))
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err == nil && time.Since(info.ModTime()) > time.Hour {
			_ = c.run("pg_ctl", "-D", dir, "-m", "immediate", "stop")
			_ = os.RemoveAll(dir)
		}
	}
}

func (c *pgCluster) start() error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_connections=200", c.port, c.dir)
	for _, setting := range c.settings {
		opts += " -c " + setting
	}
	return c.run("pg_ctl", "-D", c.dir, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "start")
}

// crash stops the server the way a power cut would (immediate: no
// checkpoint; the restart replays the WAL).
func (c *pgCluster) crash() error {
	return c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop")
}

func (c *pgCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// run runs a server binary, as the postgres user when we are root.
func (c *pgCluster) run(name string, args ...string) error {
	path := filepath.Join(c.bin, name)
	cmd := exec.Command(path, args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %v\n%s", name, args, err, out)
	}
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
