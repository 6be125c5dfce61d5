package integration_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCLISchedules(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out := string(c.run("schedule", "create", "nightly-report", "--cron", "0 3 * * *", "--tz", "Europe/Berlin",
		"--type", "report.weekly", "--input", `{"week":"last"}`))
	require.Contains(t, out, "schedule nightly-report created")

	var schedules []struct {
		Name, Cron, Timezone, TaskType string
		Paused                         bool
		Input                          json.RawMessage
	}
	require.NoError(t, json.Unmarshal(c.run("schedule", "list", "-o", "json"), &schedules))
	require.Len(t, schedules, 1)
	require.Equal(t, "nightly-report", schedules[0].Name)
	require.Equal(t, "Europe/Berlin", schedules[0].Timezone)
	require.JSONEq(t, `{"week":"last"}`, string(schedules[0].Input))

	require.Contains(t, string(c.run("schedule", "pause", "nightly-report")), "paused")
	require.Contains(t, string(c.run("schedule", "list")), "paused")
	require.Contains(t, string(c.run("schedule", "resume", "nightly-report")), "resumed")

	for _, bad := range [][]string{
		{"schedule", "create", "x", "--cron", "0 25 * * *", "--type", "t"},
		{"schedule", "create", "x", "--cron", "@daily", "--tz", "Nowhere/City", "--type", "t"},
		{"schedule", "create", "x", "--cron", "@daily", "--type", "t", "--input", "{"},
		{"schedule", "create", "nightly-report", "--cron", "@daily", "--type", "t"},
		{"schedule", "pause", "missing"},
	} {
		out, err := c.command(bad...).CombinedOutput()
		require.Error(t, err, "%v", bad)
		require.NotEmpty(t, out)
	}
	require.Contains(t, string(c.run("schedule", "delete", "nightly-report")), "deleted")
}
