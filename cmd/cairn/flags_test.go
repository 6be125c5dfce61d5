package main

import (
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
