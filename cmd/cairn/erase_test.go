package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
)

// With --keys the CLI reads an encrypted namespace's payloads in clear;
// without, sealed; cairn task erase shreds a finished task's (keys or
// not), the history ending with task_erased. A bad keys file is a usage
// error saying what is wrong. On both stores.
func TestEncryptedTasksThroughTheCLI(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			keys := filepath.Join(t.TempDir(), "keys.json")
			key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("c", 32)))
			require.NoError(t, os.WriteFile(keys, []byte(`{"namespaces":{"clitest":{"current":"k1","keys":[{"id":"k1","key":"`+key+`"}]}}}`), 0o600))
			codec, err := seal.LoadKeys(keys)
			require.NoError(t, err)
			var id uuid.UUID
			tg.withStore(t, func(s store.Store) {
				c, err := sdk.NewClient(sdk.ClientConfig{Store: s, Namespace: "clitest", Keys: codec})
				require.NoError(t, err)
				defer c.Close()
				res, err := c.StartDynamic(context.Background(), sdk.TypeRef{Name: "cli.test", Version: 1}, map[string]string{"iban": "DE-SECRET-1"}, nil)
				require.NoError(t, err)
				id = res.ID
			})

			out, _ := tg.mustRun(t, "--keys", keys, "task", "show", id.String(), "-o", "json")
			require.Contains(t, out, "DE-SECRET-1", "with the keys the input reads in clear")
			out, _ = tg.mustRun(t, "task", "show", id.String(), "-o", "json")
			require.NotContains(t, out, "DE-SECRET-1")
			require.Contains(t, out, "cairn_sealed", "without them it reads sealed")

			_, stderr, err := tg.run(t, "task", "erase", id.String())
			require.Error(t, err, "a pending task is not erased")
			require.Contains(t, stderr+err.Error(), "only a finished task can be erased")
			tg.mustRun(t, "task", "cancel", id.String(), "--reason", "withdrawn")
			out, _ = tg.mustRun(t, "task", "erase", id.String(), "--reason", "customer asked")
			require.Equal(t, "task "+id.String()+": erased\n", out)

			out, _ = tg.mustRun(t, "--keys", keys, "task", "history", id.String(), "-o", "json")
			require.NotContains(t, out, "DE-SECRET-1", "erased: sealed even with the keys")
			require.Contains(t, out, `"task_erased"`)
			require.Contains(t, out, "customer asked")

			bad := filepath.Join(t.TempDir(), "bad.json")
			require.NoError(t, os.WriteFile(bad, []byte(`{"namespaces":{"clitest":{"current":"k2","keys":[{"id":"k1","key":"`+key+`"}]}}}`), 0o600))
			_, stderr, err = tg.run(t, "--keys", bad, "task", "show", id.String())
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), `current key "k2" is not among the keys listed`)
			require.ErrorIs(t, err, configError, "a bad keys file is a configuration error (exit 2)")
		})
	}
}
