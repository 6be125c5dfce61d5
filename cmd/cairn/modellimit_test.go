package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/sdk"
)

// cairn model-limit set, list and delete, on both stores; bad limits are
// refused with the SDK's words.
func TestModelLimitCommands(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			out, _ := tg.mustRun(t, "model-limit", "set", "gpt-4o", "--tpm", "20000", "--rpm", "500")
			require.Equal(t, "model gpt-4o: 20000 tokens and 500 requests per minute\n", out)
			out, _ = tg.mustRun(t, "model-limit", "set", "claude", "--rpm", "60")
			require.Equal(t, "model claude: unlimited tokens and 60 requests per minute\n", out)
			_, stderr, err := tg.run(t, "model-limit", "set", "gpt-4o")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "give --tpm, --rpm or both")
			_, stderr, err = tg.run(t, "model-limit", "set", "gpt-4o", "--tpm", "-5")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "TokensPerMinute -5 is outside 0..1000000000000")

			out, _ = tg.mustRun(t, "model-limit", "list")
			require.Contains(t, out, "MODEL")
			require.Contains(t, out, "gpt-4o")
			out, _ = tg.mustRun(t, "model-limit", "list", "-o", "json")
			var limits []sdk.ModelLimitInfo
			require.NoError(t, json.Unmarshal([]byte(out), &limits), out)
			require.Len(t, limits, 2)
			require.Equal(t, "claude", limits[0].Model)
			require.Equal(t, sdk.ModelLimit{TokensPerMinute: 20000, RequestsPerMinute: 500}, limits[1].ModelLimit)

			out, _ = tg.mustRun(t, "model-limit", "delete", "gpt-4o")
			require.Equal(t, "model gpt-4o: limit removed\n", out)
			_, _, err = tg.run(t, "model-limit", "delete", "gpt-4o")
			require.Error(t, err, "no limit to remove")
		})
	}
}
