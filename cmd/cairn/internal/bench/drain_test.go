package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPaddedInputIsAsLongAsAsked(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 5, 20, 21, 200, 4096} {
		in, err := json.Marshal(paddedInput(3, n))
		require.NoError(t, err)
		if n > len(`{"steps":3,"pad":""}`) { // shorter than a padded input: the bare one
			require.Len(t, in, n, "--input-bytes %d", n)
		} else {
			require.JSONEq(t, `{"steps":3}`, string(in), "--input-bytes %d leaves the bare input", n)
		}
		var back benchInput
		require.NoError(t, json.Unmarshal(in, &back))
		require.Equal(t, 3, back.Steps)
	}
}

// A drain on PostgreSQL ends when the done notifications have named every
// task, confirmed by one poll; the embedded store, which has none, polls.
// Either way every task completed with its history written.
func TestThroughputCountsDoneNotifications(t *testing.T) {
	t.Parallel()
	params := Params{Tasks: 500, Batch: 200, Workers: 1, Concurrency: 50, MaxConns: 4,
		Timeout: time.Minute, DrainPoll: 10 * time.Millisecond}
	for _, store := range []string{"PostgreSQL", "SQLite"} {
		var out bytes.Buffer
		cfg := embeddedConfig(&out)
		if store == "PostgreSQL" {
			cfg = pgConfig(t, "bench_counted", &out)
		}
		require.NoError(t, Throughput(context.Background(), cfg, params), store)
		var report drainReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &report), out.String())
		require.EqualValues(t, params.Tasks, report.Completed, store)
		require.EqualValues(t, 4*params.Tasks, report.EventsWritten, store)
		require.Positive(t, report.DrainSeconds, store)
		require.Equal(t, store == "PostgreSQL", report.Counted, store)
		if store == "PostgreSQL" {
			require.Equal(t, 1, report.Polls, "one poll confirms the count")
		}
	}
}
