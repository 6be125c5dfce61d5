package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func allMigrations(t *testing.T) []migrations.Migration {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	return all
}

// requireMigrated checks that schema has every migration recorded exactly
// once and its tables in place.
func requireMigrated(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := context.Background()
	all := allMigrations(t)
	rows, err := pool.Query(ctx, "SELECT version, name FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	type rec struct {
		Version int
		Name    string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	require.NoError(t, err)
	want := make([]rec, len(all))
	for i, m := range all {
		want[i] = rec{m.Version, m.Name}
	}
	require.Equal(t, want, got)
	for _, table := range []string{"tasks", "events", "leaders"} {
		var exists bool
		err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, table}.Sanitize()).Scan(&exists)
		require.NoError(t, err)
		require.True(t, exists, "table %s", table)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("SecondRunIsNoOp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pool := enginetest.Pool(t)
		schema := enginetest.UnmigratedSchema(t)
		all := allMigrations(t)

		applied, err := pgstore.Migrate(ctx, pool, schema)
		require.NoError(t, err)
		require.Len(t, applied, len(all))
		for i, m := range applied {
			require.Equal(t, all[i].Version, m.Version)
			require.Equal(t, all[i].Name, m.Name)
			require.NotNil(t, m.AppliedAt)
		}
		requireMigrated(t, pool, schema)

		applied, err = pgstore.Migrate(ctx, pool, schema)
		require.NoError(t, err)
		require.Empty(t, applied)
		requireMigrated(t, pool, schema)

		// The migrated schema works.
		s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema})
		require.NoError(t, err)
		enginetest.StartTask(t, s, nil)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("ConcurrentMigratorsTakeTurns", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		schema := enginetest.UnmigratedSchema(t)
		const n = 5
		pools := make([]*pgxpool.Pool, n)
		for i := range pools {
			pools[i] = enginetest.NewPool(t, 2) // one process each
		}
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			applied = make([][]store.MigrationState, n)
			errs    = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				applied[i], errs[i] = pgstore.Migrate(ctx, pools[i], schema)
			})
		}
		close(start)
		wg.Wait()
		total := 0
		for i := range n {
			require.NoError(t, errs[i], "migrator %d", i)
			total += len(applied[i])
		}
		require.Equal(t, len(allMigrations(t)), total, "each migration applied by exactly one migrator")
		requireMigrated(t, pools[0], schema)
	})

	t.Run("Status", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pool := enginetest.Pool(t)
		schema := enginetest.UnmigratedSchema(t)
		all := allMigrations(t)

		status, err := pgstore.MigrationStatus(ctx, pool, schema)
		require.NoError(t, err)
		require.Len(t, status, len(all))
		for i, st := range status {
			require.Equal(t, all[i].Version, st.Version)
			require.Equal(t, all[i].Name, st.Name)
			require.Nil(t, st.AppliedAt, "pending in a schema never migrated")
		}
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
		require.False(t, exists, "a status check creates nothing")

		_, err = pgstore.Migrate(ctx, pool, schema)
		require.NoError(t, err)
		status, err = pgstore.MigrationStatus(ctx, pool, schema)
		require.NoError(t, err)
		require.Len(t, status, len(all))
		for _, st := range status {
			require.NotNil(t, st.AppliedAt, "migration %04d applied", st.Version)
		}

		// A migration recorded as not applied shows as pending again.
		_, err = pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+" WHERE version = $1", all[len(all)-1].Version)
		require.NoError(t, err)
		status, err = pgstore.MigrationStatus(ctx, pool, schema)
		require.NoError(t, err)
		require.Nil(t, status[len(status)-1].AppliedAt)
	})

	t.Run("MigrateToStopsAtTheVersion", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pool := enginetest.Pool(t)
		schema := enginetest.UnmigratedSchema(t)
		all := allMigrations(t)

		_, err := pgstore.MigrateTo(ctx, pool, schema, all[len(all)-1].Version+1)
		require.ErrorContains(t, err, "no migration has version")
		applied, err := pgstore.MigrateTo(ctx, pool, schema, all[2].Version)
		require.NoError(t, err)
		require.Len(t, applied, 3)
		status, err := pgstore.MigrationStatus(ctx, pool, schema)
		require.NoError(t, err)
		for i, st := range status {
			require.Equal(t, i <= 2, st.AppliedAt != nil, "migration %04d", st.Version)
		}
		applied, err = pgstore.Migrate(ctx, pool, schema)
		require.NoError(t, err)
		require.Len(t, applied, len(all)-3, "the rest")
		requireMigrated(t, pool, schema)
	})

	t.Run("RejectsBadSchemaNames", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pool := enginetest.Pool(t)
		for _, name := range []string{"", "Bad", `x"; DROP SCHEMA public; --`} {
			_, err := pgstore.Migrate(ctx, pool, name)
			require.Error(t, err, "%q", name)
			_, err = pgstore.MigrationStatus(ctx, pool, name)
			require.Error(t, err, "%q", name)
		}
	})
}

// TestMigrateMakesMissingHotFunctions: a schema whose migrations are all
// applied but which lacks this version's hot functions (an upgrade that
// changed a hot statement) gets them from Migrate, and a store without
// prepared statements works on it.
func TestMigrateMakesMissingHotFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := enginetest.Pool(t)
	schema := enginetest.Schema(t)
	countHot := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
			WHERE n.nspname = $1 AND p.proname LIKE 'hot\_%'`, schema).Scan(&n))
		return n
	}
	made := countHot()
	require.Positive(t, made)
	_, err := pool.Exec(ctx, `DO $$ DECLARE f regprocedure; BEGIN
		FOR f IN SELECT p.oid FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = '`+schema+`' AND p.proname LIKE 'hot\_%'
		LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP; END $$`)
	require.NoError(t, err)
	require.Zero(t, countHot())

	applied, err := pgstore.Migrate(ctx, pool, schema)
	require.NoError(t, err)
	require.Empty(t, applied, "no migration was pending")
	require.Equal(t, made, countHot())

	unprepared, err := pgstore.OpenPool(ctx, enginetest.DatabaseURL(t), pgstore.PoolOptions{MaxConns: 2, Pooler: pgstore.PoolerTransaction})
	require.NoError(t, err)
	defer unprepared.Close()
	s, err := pgstore.New(pgstore.Config{Pool: unprepared, Schema: schema})
	require.NoError(t, err)
	enginetest.StartTask(t, s, nil)
	require.Len(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 5, time.Minute)), 1)
}

// A schema never migrated (a cell opened while it was down, then back)
// fails as out of reach, saying what to run, so the server answers 503
// and the runtime retries rather than treating it as a bug.
func TestUnmigratedSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: "never_migrated"})
	require.NoError(t, err)
	_, err = s.NamespaceList(context.Background(), &store.NamespaceListParams{})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "run cairn migrate up")
}

// Migration 0019 replaces the status check without scanning tasks under
// its lock (NOT VALID: every row passed the narrower check before), and
// the check still refuses a status it does not name.
func TestStatusCheckReplacedWithoutAScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	pool, schema := s.Pool(), s.Schema()
	var validated bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint
		WHERE conname = 'tasks_status_check' AND conrelid = $1::regclass`, pgx.Identifier{schema, "tasks"}.Sanitize()).Scan(&validated))
	require.False(t, validated, "added NOT VALID: no scan of tasks")
	id := enginetest.StartTask(t, s, nil)
	_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "tasks"}.Sanitize()+" SET status = 'bogus' WHERE id = $1", id)
	require.ErrorContains(t, err, "tasks_status_check")
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "tasks"}.Sanitize()+" SET status = 'continued' WHERE id = $1", id)
	require.NoError(t, err)
}
