package sdk_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// BenchmarkFork measures Client.Fork of a finished task of 100 steps at
// its last one (100 copies): the original's history read and decoded,
// the copies encoded, the start, the copies and task_forked written in
// one transaction. Per fork, on each store.
//
//	CAIRN_TEST_DATABASE_URL=... go test -run '^$' -bench Fork -benchtime 200x ./sdk
func BenchmarkFork(b *testing.B) {
	b.Run("PostgreSQL", func(b *testing.B) { benchFork(b, enginetest.Store(b)) })
	b.Run("SQLite", func(b *testing.B) {
		lite, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "cairn.db"))
		require.NoError(b, err)
		b.Cleanup(func() { _ = lite.Close() })
		benchFork(b, lite)
	})
}

func benchFork(b *testing.B, st store.Store) {
	const steps = 100
	wf := sdk.NewWorkflow("bench.fork", 1, func(ctx workflow.Context, _ int) (int, error) {
		total := 0
		for i := range steps {
			n, err := workflow.Step(ctx, fmt.Sprint("step-", i), func(context.Context) (int, error) { return i, nil }, nil)
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}, nil)
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, PollInterval: 20 * time.Millisecond})
	require.NoError(b, err)
	sdk.Register(worker, wf)
	ctx := context.Background()
	require.NoError(b, worker.Start(ctx))
	res, err := sdk.Start(ctx, client, wf, 0, nil)
	require.NoError(b, err)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	info, err := client.Wait(waitCtx, res.ID)
	cancel()
	require.NoError(b, err)
	require.Equal(b, history.StatusCompleted, info.Status)
	// No worker runs the forks: each stays pending with its copies.
	require.NoError(b, worker.Stop(ctx))

	b.ResetTimer()
	for range b.N {
		if _, err := client.Fork(ctx, res.ID, sdk.ForkOpts{At: steps - 1}); err != nil {
			b.Fatal(err)
		}
	}
}
