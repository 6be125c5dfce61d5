package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/enginetest"
)

// pgConfig is a bench configuration on the test database, in a schema of
// its own named after prefix (dropped when the test ends), with a report
// as JSON into out.
func pgConfig(t *testing.T, prefix string, out *bytes.Buffer) Config {
	t.Helper()
	url := enginetest.DatabaseURL(t)
	schema := fmt.Sprintf("%s_%x", prefix, uuid.New().ID())
	t.Cleanup(func() {
		pool, err := pgxpool.New(context.Background(), url)
		if err == nil {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			pool.Close()
		}
	})
	return Config{DatabaseURL: url, Schema: schema, Namespace: "default", JSON: true, Stdout: out, Stderr: io.Discard,
		ConnectFunc: func(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				return nil, err
			}
			pc.MaxConns = maxConns
			return pgxpool.NewWithConfig(ctx, pc)
		}}
}
