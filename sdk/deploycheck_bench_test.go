package sdk_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
)

// BenchmarkDeployCheck measures a worker's start-up replay of 10,000
// in-flight tasks (each waiting on an approval after a step) on the
// embedded store: one op is a Start whose deploy check reads and replays
// all of them, then its Stop.
//
//	go test -run XXX -bench BenchmarkDeployCheck -benchtime 3x ./sdk
func BenchmarkDeployCheck(b *testing.B) {
	const tasks = 10_000
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "cairn.db"))
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	recorder, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 50, PollInterval: 50 * time.Millisecond})
	require.NoError(b, err)
	sdk.Register(recorder, approvalV1(false))
	require.NoError(b, recorder.Start(ctx))
	entries := make([]sdk.StartParams, 0, 500)
	for i := range tasks {
		entries = append(entries, sdk.StartEntry(approvalV1(false), i, nil))
		if len(entries) == cap(entries) {
			_, err := client.StartMany(ctx, entries)
			require.NoError(b, err)
			entries = entries[:0]
		}
	}
	// Until every task waits on its approval: none running, none pending
	// without an attempt.
	for {
		time.Sleep(500 * time.Millisecond)
		running, err := client.List(ctx, &sdk.ListOpts{Status: history.StatusRunning, Limit: 1})
		require.NoError(b, err)
		fresh := 0
		var before uuid.UUID
		for {
			page, err := client.ListPage(ctx, &sdk.ListOpts{Status: history.StatusPending, Limit: sdk.MaxListLimit, Before: before})
			require.NoError(b, err)
			for _, t := range page.Tasks {
				if t.Attempt == 0 {
					fresh++
				}
			}
			if page.Next == uuid.Nil {
				break
			}
			before = page.Next
		}
		if len(running) == 0 && fresh == 0 {
			break
		}
	}
	require.NoError(b, recorder.Stop(ctx))
	b.ResetTimer()
	for range b.N {
		w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st,
			DeployCheck: sdk.DeployCheckConfig{Sample: tasks, Policy: sdk.DeployIgnore}})
		require.NoError(b, err)
		sdk.Register(w, approvalV1(true))
		require.NoError(b, w.Start(ctx))
		require.Len(b, w.Stranded(), tasks)
		b.StopTimer()
		require.NoError(b, w.Stop(ctx))
		b.StartTimer()
	}
	b.ReportMetric(float64(tasks)*float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
