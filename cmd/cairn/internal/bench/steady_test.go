package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
)

// The steady mode samples the tables while retention removes what the
// producer's tasks leave: the live tasks stay a fraction of those started
// (it fails if nothing is removed), and every sample names every table.
func TestSteadyStateSamplesWhileRetentionRemoves(t *testing.T) {
	t.Parallel()
	url := enginetest.DatabaseURL(t)
	schema := fmt.Sprintf("bench_steady_%x", uuid.New().ID())
	var out bytes.Buffer
	cfg := Config{DatabaseURL: url, Schema: schema, Namespace: "default", JSON: true, Stdout: &out, Stderr: io.Discard,
		ConnectFunc: func(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				return nil, err
			}
			pc.MaxConns = maxConns
			return pgxpool.NewWithConfig(ctx, pc)
		}}
	t.Cleanup(func() {
		pool, err := pgxpool.New(context.Background(), url)
		if err == nil {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			pool.Close()
		}
	})
	err := Steady(context.Background(), cfg, Params{Rate: 200, Duration: 10 * time.Second, Retention: 2 * time.Second,
		Workers: 1, Concurrency: 50, MaxConns: 8}, true)
	require.NoError(t, err)
	var report steadyReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &report), out.String())
	require.GreaterOrEqual(t, len(report.Samples), 10)
	last := report.Samples[len(report.Samples)-1]
	require.Less(t, last.Rows["tasks"], int64(last.Started/2), "retention removed the tasks that finished: %+v", last)
	for _, table := range steadyTables {
		require.Positive(t, last.Bytes[table], table)
	}
	require.Positive(t, report.PlateauRatio)
	err = Steady(context.Background(), Config{}, Params{Rate: 1, Duration: time.Minute, Retention: time.Second, Workers: 1, Concurrency: 1, MaxConns: 1}, true)
	require.ErrorIs(t, err, ErrConfig, "PostgreSQL only")
}
