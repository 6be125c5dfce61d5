package pgstore_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
)

// TestIndexSummarize: the events' BRIN index no longer asks autovacuum
// to summarize (migration 0026), and IndexSummarize summarizes the
// ranges written since its last call, once.
func TestIndexSummarize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	var options []string
	require.NoError(t, s.Pool().QueryRow(ctx, "SELECT reloptions FROM pg_class WHERE oid = $1::regclass",
		enginetest.TableName(s, "events_at_brin_idx")).Scan(&options))
	require.Contains(t, options, "autosummarize=off")

	n, err := s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "an empty table has no ranges")
	ranges := enginetest.FillEventRanges(t, s)
	n, err = s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Equal(t, ranges, n, "the full ranges the events went to")
	n, err = s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a summarized range is kept up to date by the inserts")
}

// TestIndexSummarizeDoesNotWaitForAVacuum: a VACUUM of events holds the
// lock a summary takes (and summarizes the ranges itself): the leader's
// call gives up after its lock timeout, reporting nothing done.
func TestIndexSummarizeDoesNotWaitForAVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	ranges := enginetest.FillEventRanges(t, s)
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE "+enginetest.TableName(s, "events")+" IN SHARE UPDATE EXCLUSIVE MODE")
	require.NoError(t, err)

	n, err := s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, tx.Rollback(ctx))
	n, err = s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Equal(t, ranges, n, "once the lock is free")
}

// TestIndexSummarizeAsTheApplicationsRole: a store connected as a role
// that reads and writes the tables but does not own them (the runtime
// role beside a migration role, docs/deployment.md) summarizes through
// the function that runs as the owner; a role the function's EXECUTE is
// revoked from is refused, with an error marked ErrUnsupported that says
// what to grant.
func TestIndexSummarizeAsTheApplicationsRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := enginetest.Store(t)
	ranges := enginetest.FillEventRanges(t, owner)
	role := "cairn_runtime_" + uuid.NewString()[:8]
	quoted := pgx.Identifier{role}.Sanitize()
	schema := pgx.Identifier{owner.Schema()}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + quoted,
		"GRANT USAGE ON SCHEMA " + schema + " TO " + quoted,
		"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA " + schema + " TO " + quoted,
	} {
		_, err := owner.Pool().Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + quoted, "DROP ROLE " + quoted} {
			if _, err := owner.Pool().Exec(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	cfg, err := pgxpool.ParseConfig(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+quoted)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: owner.Schema()})
	require.NoError(t, err)

	n, err := s.IndexSummarize(ctx)
	require.NoError(t, err)
	require.Equal(t, ranges, n)

	_, err = owner.Pool().Exec(ctx, "REVOKE EXECUTE ON FUNCTION "+schema+".summarize_event_ranges() FROM PUBLIC")
	require.NoError(t, err)
	_, err = s.IndexSummarize(ctx)
	require.Error(t, err)
	require.True(t, errors.Is(err, store.ErrUnsupported), "%v", err)
	require.Contains(t, err.Error(), "grant it EXECUTE")
}
