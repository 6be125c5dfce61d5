package pgstore

import (
	"context"
	"hash/fnv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/migrations"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrate applies every pending migration to schema (created if missing) and
// returns the ones it applied. Each migration runs in its own transaction
// together with its record in schema_migrations (all of them in one when
// the schema has none yet: a new install), under a transaction-scoped
// advisory lock for the schema taken first (pg_advisory_xact_lock), so
// processes migrating at once take turns and each migration is applied
// exactly once. A transaction-scoped lock ends with its transaction whatever
// happens to the session, which is what makes migrating through a pooler in
// transaction mode safe: a session-level lock would stay with whichever
// server connection took it.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]store.MigrationState, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	// Nothing to do is found out without DDL or locks, so a role that may
	// only read and write cairn's tables (see the deployment guide) can
	// start a process that migrates on start once the schema is current.
	versionsCurrent, functionsCurrent, err := upToDate(ctx, pool, schema, all)
	if err != nil || (versionsCurrent && functionsCurrent) {
		return nil, err
	}
	var applied []store.MigrationState
	if !versionsCurrent {
		if applied, err = applyMigrations(ctx, pool, schema, all); err != nil {
			return applied, err
		}
	}
	err = ensureHotFunctions(ctx, pool, schema)
	var pgErr *pgconn.PgError
	if versionsCurrent && errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// A role that may not create functions (the application's) starting
		// a process that migrates on start, after an upgrade the owner has
		// not migrated yet: the tables are current, so it may start. Only a
		// store without prepared statements needs the functions, and its
		// calls say what to run.
		return nil, nil
	}
	return applied, errors.Wrapf(interpretError(err), "schema %s", schema)
}

// MigrateTo applies the pending migrations of schema up to and including
// version, and no later one, and returns the ones it applied: an upgrade in
// stages, or a schema as an earlier release left it, for tests that check a
// migration against the data of the shape before it. It creates no hot
// functions (they are this release's, for a current schema: Migrate makes
// them), and refuses a version no migration has.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, version int) ([]store.MigrationState, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	for i, m := range all {
		if m.Version == version {
			return applyMigrations(ctx, pool, schema, all[:i+1])
		}
	}
	return nil, errors.Newf("no migration has version %d (the latest is %d)", version, all[len(all)-1].Version)
}

// applyMigrations applies the migrations of all that schema lacks.
func applyMigrations(ctx context.Context, pool *pgxpool.Pool, schema string, all []migrations.Migration) ([]store.MigrationState, error) {
	applied, done, err := applyToFreshSchema(ctx, pool, schema, all)
	if err != nil || len(done) == 0 {
		return applied, err
	}
	prefix := pgx.Identifier{schema}.Sanitize() + "."
	for _, m := range all {
		if _, ok := done[m.Version]; ok {
			continue
		}
		ran := false
		err := withMigrationLock(ctx, pool, schema, func(tx pgx.Tx) error {
			// Another process may have applied it since the versions were read.
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+prefix+"schema_migrations WHERE version = $1)", m.Version).Scan(&exists); err != nil {
				return errors.Wrap(err, "read schema_migrations")
			}
			if exists {
				return nil
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, migrations.SchemaMarker, prefix)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+prefix+"schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			ran = err == nil
			return err
		})
		if err != nil {
			return applied, errors.Wrapf(interpretError(err), "apply migration %04d_%s to schema %s", m.Version, m.Name, schema)
		}
		if ran {
			now := time.Now()
			applied = append(applied, store.MigrationState{Version: m.Version, Name: m.Name, AppliedAt: &now})
		}
	}
	return applied, nil
}

// applyToFreshSchema applies every migration of all to a schema that has
// none yet, in one transaction: a new install (and each test's schema)
// pays one lock and one commit, not one for each migration, and a
// migration that fails leaves nothing behind. When the schema has some
// already (an upgrade, or another process was first), nothing is done
// and done holds the versions applied: the caller applies the rest one
// by one.
func applyToFreshSchema(ctx context.Context, pool *pgxpool.Pool, schema string, all []migrations.Migration) (applied []store.MigrationState, done map[int]time.Time, err error) {
	prefix := pgx.Identifier{schema}.Sanitize() + "."
	err = withMigrationLock(ctx, pool, schema, func(tx pgx.Tx) error {
		var err error
		if done, err = appliedVersions(ctx, tx, schema); err != nil || len(done) > 0 {
			return err
		}
		versions, names := make([]int, len(all)), make([]string, len(all))
		for i, m := range all {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, migrations.SchemaMarker, prefix)); err != nil {
				return errors.Wrapf(err, "apply migration %04d_%s", m.Version, m.Name)
			}
			versions[i], names[i] = m.Version, m.Name
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+prefix+"schema_migrations (version, name) SELECT * FROM unnest($1::integer[], $2::text[])", versions, names)
		return err
	})
	if err != nil {
		return nil, nil, errors.Wrapf(interpretError(err), "migrate schema %s", schema)
	}
	if len(done) > 0 {
		return nil, done, nil
	}
	now := time.Now()
	for _, m := range all {
		applied = append(applied, store.MigrationState{Version: m.Version, Name: m.Name, AppliedAt: &now})
	}
	return applied, nil, nil
}

// MigrationStatus lists every known migration with the time it was applied
// to schema, if it was.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool, schema string) ([]store.MigrationState, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "connect")
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&exists); err != nil {
		return nil, errors.Wrap(err, "look up schema_migrations")
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedVersions(ctx, conn, schema); err != nil {
			return nil, err
		}
	}
	out := make([]store.MigrationState, 0, len(all))
	for _, m := range all {
		st := store.MigrationState{Version: m.Version, Name: m.Name}
		if at, ok := done[m.Version]; ok {
			st.AppliedAt = &at
		}
		out = append(out, st)
	}
	return out, nil
}

// upToDate reports whether schema has every migration of all applied
// (versions), and every hot function of this version (functions).
func upToDate(ctx context.Context, pool *pgxpool.Pool, schema string, all []migrations.Migration) (versions, functions bool, err error) {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&exists); err != nil {
		return false, false, errors.Wrap(interpretError(err), "look up schema_migrations")
	}
	if !exists {
		return false, false, nil
	}
	done, err := appliedVersions(ctx, pool, schema)
	if err != nil {
		return false, false, err
	}
	for _, m := range all {
		if _, ok := done[m.Version]; !ok {
			return false, false, nil
		}
	}
	queries, err := loadQueries(schema)
	if err != nil {
		return true, false, err
	}
	missing, err := missingHotFunctions(ctx, pool, schema, hotFunctions(queries))
	return true, len(missing) == 0, err
}

// withMigrationLock runs fn in a transaction that holds schema's migration
// lock and in which the schema and its schema_migrations exist.
func withMigrationLock(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(pgx.Tx) error) error {
	// Read committed whatever the server's default: each statement sees
	// what the process that held the lock before committed.
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey(schema)); err != nil {
			return errors.Wrapf(err, "take migration lock for schema %s", schema)
		}
		prefix := pgx.Identifier{schema}.Sanitize()
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
		// when the schema exists: an owner given only the schema (the
		// deployment guide's roles) must not be asked for it.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", prefix).Scan(&exists); err != nil {
			return errors.Wrapf(err, "look up schema %s", schema)
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+prefix); err != nil {
				return errors.Wrapf(err, "create schema %s", schema)
			}
		}
		_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+prefix+`.schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`)
		if err != nil {
			return errors.Wrapf(err, "create schema_migrations in %s", schema)
		}
		return fn(tx)
	})
}

func appliedVersions(ctx context.Context, conn querier, schema string) (map[int]time.Time, error) {
	rows, err := conn.Query(ctx, "SELECT version, applied_at FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize())
	if err != nil {
		return nil, errors.Wrap(err, "read schema_migrations")
	}
	done := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, errors.Wrap(err, "read schema_migrations")
		}
		done[v] = at
	}
	return done, errors.Wrap(rows.Err(), "read schema_migrations")
}

// migrationLockKey is the advisory lock key for migrating schema: the same
// in every process, different per schema.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("cairn.migrate:" + schema))
	return int64(h.Sum64())
}
