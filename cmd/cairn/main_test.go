package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the test binary if a command leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}

// cliTarget is a store the commands run against: the global flags that
// name it, and a way to open it from the test.
type cliTarget struct {
	flags []string
	// withStore calls fn with the store open; the embedded store is closed
	// again after, since a command opens it itself.
	withStore func(t *testing.T, fn func(store.Store))
}

// cliTargets are the embedded store in a fresh file, and a fresh schema on
// the test PostgreSQL (enginetest skips that one when there is none).
var cliTargets = map[string]func(t *testing.T) cliTarget{
	"embedded": func(t *testing.T) cliTarget {
		path := filepath.Join(t.TempDir(), "cairn.db")
		return cliTarget{
			flags: []string{"--database-url=", "--db", path, "--namespace", "clitest"},
			withStore: func(t *testing.T, fn func(store.Store)) {
				s, err := sqlitestore.Open(context.Background(), path)
				require.NoError(t, err)
				defer func() { require.NoError(t, s.Close()) }()
				fn(s)
			},
		}
	},
	"postgres": func(t *testing.T) cliTarget {
		s := enginetest.Store(t)
		return cliTarget{
			flags:     []string{"--database-url", enginetest.DatabaseURL(t), "--schema", s.Schema(), "--namespace", "clitest"},
			withStore: func(_ *testing.T, fn func(store.Store)) { fn(s) },
		}
	},
}

// run runs cairn with the target's global flags and args, in process, and
// returns what it printed.
func (c cliTarget) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(append([]string{}, c.flags...), args...))
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// mustRun is run for a command that must succeed.
func (c cliTarget) mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, err := c.run(t, args...)
	require.NoError(t, err, "cairn %v; stderr: %s", args, stderr)
	return stdout, stderr
}
