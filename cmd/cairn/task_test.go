package main

import (
	"strconv"
	"testing"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

func TestCLITaskListRefusesBadFlags(t *testing.T) {
	tg := cliTargets["embedded"](t)
	bound := strconv.Itoa(sdk.MaxListLimit)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--limit", "100000"}, "--limit 100000: use 1 to " + bound},
		{[]string{"--limit", "1001"}, "--limit 1001: use 1 to " + bound},
		{[]string{"--limit", "0"}, "--limit 0: use 1 to " + bound},
	} {
		_, _, err := tg.run(t, append([]string{"task", "list"}, tc.args...)...)
		require.True(t, errors.Is(err, configError), "%v: a configuration error (exit 2): %v", tc.args, err)
		require.ErrorContains(t, err, tc.msg)
	}
	_, _, err := tg.run(t, "task", "list", "--limit", bound)
	require.NoError(t, err, "--limit %s, the real bound, is accepted", bound)
	require.Equal(t, 1000, sdk.MaxListLimit, "the README and the API's docs say 1000")
}
