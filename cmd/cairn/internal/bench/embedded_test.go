package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// embeddedConfig is a bench configuration without a database URL: the
// embedded store, a report as JSON into out.
func embeddedConfig(out *bytes.Buffer) Config {
	return Config{Namespace: "default", JSON: true, Stdout: out, Stderr: io.Discard}
}

// TestLatencyOnTheEmbeddedStore runs the latency mode without PostgreSQL
// (issue 19 asks for the embedded store's start latency) and checks that
// every task it started was accepted, started and finished.
func TestLatencyOnTheEmbeddedStore(t *testing.T) {
	var out bytes.Buffer
	err := Latency(context.Background(), embeddedConfig(&out), Params{
		Rate: 50, Duration: time.Second, Workers: 1, Concurrency: 10, MaxConns: 4,
	})
	require.NoError(t, err)
	var report latencyReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report))
	require.NotEmpty(t, report.SQLiteVersion, "the embedded store was measured")
	require.Len(t, report.Runs, len(latencySteps))
	for _, r := range report.Runs {
		require.Equal(t, r.Tasks, r.Finished, "%d-step: every task finished", r.Steps)
		require.Equal(t, r.Tasks, r.ScheduleToAccepted.Count, "%d-step: every start was timed", r.Steps)
		require.Positive(t, r.ScheduleToStart.P50)
		require.LessOrEqual(t, r.ScheduleToAccepted.P50, r.ScheduleToStart.P50,
			"%d-step: a task is accepted before its first step starts", r.Steps)
	}
}

// TestReplayOnTheEmbeddedStore builds histories on the embedded store and
// checks the report names each size with what it loaded.
func TestReplayOnTheEmbeddedStore(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, Replay(context.Background(), embeddedConfig(&out), Params{Sizes: []int{10, 2500}}))
	var report replayReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report))
	require.NotEmpty(t, report.SQLiteVersion)
	require.Len(t, report.Rows, 2)
	for i, size := range []int{10, 2500} {
		require.Equal(t, size, report.Rows[i].Events)
		require.Positive(t, report.Rows[i].EventsPerSecond)
	}
}
