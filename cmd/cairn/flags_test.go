package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A database URL in the environment holds a password: --help must not
// print it as the flag's default, and the commands must still use it.
func TestDatabaseURLFromTheEnvironmentStaysOutOfHelp(t *testing.T) {
	t.Setenv("CAIRN_DATABASE_URL", "postgres://postgres:s3cret@127.0.0.1:1/cairn?connect_timeout=2")
	var tg cliTarget
	for _, args := range [][]string{{"--help"}, {"task", "list", "--help"}, {"server", "--help"}} {
		stdout, stderr, err := tg.run(t, args...)
		require.NoError(t, err, "cairn %v", args)
		require.Contains(t, stdout, "--database-url", "cairn %v", args)
		require.NotContains(t, stdout+stderr, "s3cret", "cairn %v prints the password", args)
	}

	_, _, err := tg.run(t, "--db", filepath.Join(t.TempDir(), "unused.db"), "task", "list")
	require.Error(t, err, "the environment's URL is used: port 1 answers nothing")
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "s3cret")
}

// The callback secret signs capabilities: --help must not print it from
// the environment.
func TestCallbackSecretFromTheEnvironmentStaysOutOfHelp(t *testing.T) {
	t.Setenv("CAIRN_CALLBACK_SECRET", "callback-s3cret-0123456789")
	var tg cliTarget
	for _, args := range [][]string{{"server", "--help"}, {"dev", "--help"}} {
		stdout, stderr, err := tg.run(t, args...)
		require.NoError(t, err, "cairn %v", args)
		require.Contains(t, stdout, "--callback-secret", "cairn %v", args)
		require.NotContains(t, stdout+stderr, "callback-s3cret", "cairn %v prints the secret", args)
	}
}

// --placement picks --namespace's cell as the database, and refuses a
// namespace it does not place, before anything connects.
func TestPlacementMapChoosesTheNamespacesCell(t *testing.T) {
	t.Setenv("CAIRN_DATABASE_URL", "")
	path := filepath.Join(t.TempDir(), "placement.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"cells": {"eu": "postgres://u:s3cret@127.0.0.1:1/eu?connect_timeout=2", "us": "postgres://u@127.0.0.1:2/us?connect_timeout=2"},
		"namespaces": {"acme": "eu", "globex": "us"}}`), 0o600))
	var tg cliTarget
	_, _, err := tg.run(t, "--placement", path, "--namespace", "initech", "task", "list")
	require.Error(t, err)
	require.Equal(t, exitConfig, reportError(io.Discard, err))
	require.Contains(t, err.Error(), `namespace "initech" is in no cell of the placement map (it places "acme", "globex")`)

	_, _, err = tg.run(t, "--placement", path, "--namespace", "globex", "task", "list")
	require.ErrorContains(t, err, "127.0.0.1:2", "globex's cell is the database")
	require.ErrorContains(t, err, `it is cell "us" of the placement map`)
	require.NotContains(t, err.Error(), "--database-url", "a flag --placement refuses is no advice")
	_, _, err = tg.run(t, "--placement", path, "--namespace", "acme", "task", "list")
	require.ErrorContains(t, err, "127.0.0.1:1", "acme's cell is the database")
	require.NotContains(t, err.Error(), "s3cret")

	_, _, err = tg.run(t, "--placement", path, "--database-url", "postgres://u@127.0.0.1:3/x", "task", "list")
	require.ErrorContains(t, err, "--placement and --database-url")

	// The commands that work in every cell open them all, and name each
	// that does not answer (never its password).
	_, _, err = tg.run(t, "--placement", path, "migrate", "up")
	require.ErrorContains(t, err, `cell "eu": cannot reach the database at 127.0.0.1:1`)
	require.ErrorContains(t, err, `cell "us": cannot reach the database at 127.0.0.1:2`)
	require.NotContains(t, err.Error(), "s3cret")
	_, _, err = tg.run(t, "--placement", path, "migrate", "status")
	require.ErrorContains(t, err, `migrate status: cell "eu": cannot reach the database at 127.0.0.1:1`)
	require.ErrorContains(t, err, `cell "us": cannot reach the database at 127.0.0.1:2`)
	_, _, err = tg.run(t, "--placement", path, "server", "--listen", "127.0.0.1:0")
	require.ErrorContains(t, err, `cell "eu": cannot reach the database at 127.0.0.1:1`)
	require.ErrorContains(t, err, `cell "us": cannot reach the database at 127.0.0.1:2`)
	_, _, err = tg.run(t, "--placement", path, "--listen-database-url", "postgres://u@127.0.0.1:3/x", "server")
	require.ErrorContains(t, err, `give each cell its own "listen_url"`)
	_, _, err = tg.run(t, "--placement", path, "dev")
	require.ErrorContains(t, err, "cairn dev runs on one database", "said before any namespace is looked up")

	// cairn namespace set NAME changes NAME, so it works in NAME's cell.
	_, _, err = tg.run(t, "--placement", path, "--namespace", "acme", "namespace", "set", "globex", "--retention", "1d")
	require.ErrorContains(t, err, "127.0.0.1:2", "globex's cell, not acme's")
	_, _, err = tg.run(t, "--placement", path, "namespace", "set", "initech", "--retention", "1d")
	require.ErrorContains(t, err, `namespace "initech" is in no cell`)

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"cells": {"eu": "postgres://u@127.0.0.1:1/eu"}, "namespaces": {"Acme Corp": "eu"}}`), 0o600))
	_, _, err = tg.run(t, "--placement", bad, "server")
	require.ErrorContains(t, err, `--placement: placement map: namespace "Acme Corp": use letters, digits`)

	// Commands that open no database do not read the map's cells.
	out, _, err := tg.run(t, "--placement", path, "--namespace", "initech", "token", "new", "bot", "--namespace", "acme", "--role", "read")
	require.NoError(t, err)
	require.Contains(t, out, "bot")
}

// --max-long-polls sets server.Config.MaxLongPolls: its help gives the
// default and the bound, and a value out of bounds is refused before
// anything connects.
func TestServerMaxLongPollsFlag(t *testing.T) {
	var tg cliTarget
	stdout, _, err := tg.run(t, "server", "--help")
	require.NoError(t, err)
	require.Regexp(t, `--max-long-polls int +long polls \(GET /v1/tasks/\{id\}/wait\) open at once, 1 to 100000; .*\(default 1000\)`, stdout)
	for _, bad := range []string{"0", "-1", "100001"} {
		_, _, err := tg.run(t, "--db", filepath.Join(t.TempDir(), "unused.db"), "server", "--max-long-polls", bad)
		require.ErrorContains(t, err, "--max-long-polls "+bad+": use 1 to 100000")
		require.Equal(t, exitConfig, reportError(io.Discard, err))
	}
}
