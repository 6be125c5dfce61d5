package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/payload/seal"
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

// TestReplayWithKeys builds and replays histories of tasks a client with
// keys started (cairn bench replay --keys): the bench appends in the
// store the client works in, below its payload stage.
func TestReplayWithKeys(t *testing.T) {
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	keys, err := seal.NewKeys(seal.Config{Namespaces: map[string]seal.NamespaceKeys{
		"default": {Current: "k1", Keys: []seal.KeyEntry{{ID: "k1", Key: base64.StdEncoding.EncodeToString(key)}}},
	}})
	require.NoError(t, err)
	var out bytes.Buffer
	cfg := embeddedConfig(&out)
	cfg.Keys = keys
	require.NoError(t, Replay(context.Background(), cfg, Params{Sizes: []int{10}}))
	var report replayReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report))
	require.Len(t, report.Rows, 1)
	require.Equal(t, 10, report.Rows[0].Events)
}

// TestChildrenOnTheEmbeddedStore runs the children mode flat and as a
// tree without PostgreSQL and checks that every child ran and the report
// counts the parents' wakes and histories.
func TestChildrenOnTheEmbeddedStore(t *testing.T) {
	for _, strategy := range []string{StrategyFlat, StrategyTree} {
		var out bytes.Buffer
		err := Children(context.Background(), embeddedConfig(&out), ChildrenParams{
			Children: 30, Workers: 1, Concurrency: 20, MaxConns: 4, MaxRunning: 8, Strategy: strategy, Chunk: 10,
			Timeout: time.Minute, DrainPoll: 10 * time.Millisecond,
		})
		require.NoError(t, err, strategy)
		var report childrenReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &report))
		require.NotEmpty(t, report.SQLiteVersion)
		require.Equal(t, strategy, report.Strategy)
		require.Positive(t, report.ParentAttempts)
		if strategy == StrategyFlat {
			require.EqualValues(t, 31, report.Completed, "the parent and its 30 children")
			require.Equal(t, 1+30*2+2*report.ParentAttempts, report.ParentEvents,
				"task_scheduled, two events per child, a start and an end of each attempt")
		} else {
			require.EqualValues(t, 34, report.Completed, "the parent, its 3 chunks and their 30 children")
			require.Equal(t, 3, report.Chunks)
			require.Positive(t, report.ChunkEventsMax)
		}
	}
}
