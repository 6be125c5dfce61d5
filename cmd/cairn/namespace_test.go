package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "36h": 36 * time.Hour, "90s": 90 * time.Second, "0": 0, "0d": 0,
	} {
		got, err := parseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "d", "-1d", "1.5d", "30 days", "-5m", "1d-2h", "x", "65535d1000000h"} {
		_, err := parseRetention(bad)
		require.Error(t, err, "%q is refused", bad)
	}
	require.Equal(t, "30d", retentionText(30*24*time.Hour))
	require.Equal(t, "36h0m0s", retentionText(36*time.Hour))
	require.Equal(t, "default", retentionText(0))
}

// cairn namespace set and list, on both stores: settings round trip, bad
// values are refused with a message and change nothing.
func TestNamespaceCommands(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			out, _ := tg.mustRun(t, "namespace", "set", "tenant-a", "--retention", "30d", "--key-retention", "36h")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s\n", out)
			_, stderr, err := tg.run(t, "namespace", "set", "tenant-a", "--retention", "-2d")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "days are a whole number")
			_, _, err = tg.run(t, "namespace", "set", "bad name!", "--retention", "1d")
			require.Error(t, err, "a bad namespace name is refused")

			out, _ = tg.mustRun(t, "namespace", "list")
			require.Contains(t, out, "tenant-a   30d        36h0m0s        -")
			out, _ = tg.mustRun(t, "namespace", "set", "tenant-a", "--key-retention", "36h")
			require.Equal(t, "namespace tenant-a: retention 30d, key retention 36h0m0s\n", out,
				"a flag not given keeps its setting")
			out, _ = tg.mustRun(t, "namespace", "list", "-o", "json")
			var views []namespaceView
			require.NoError(t, json.Unmarshal([]byte(out), &views), out)
			require.Equal(t, []namespaceView{{Name: "tenant-a", RetentionSeconds: 30 * 86400, KeyRetentionSeconds: 36 * 3600}}, views)
		})
	}
}
