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
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrate applies every pending migration to schema (created if missing) and
// returns the ones it applied. It holds a PostgreSQL advisory lock for the
// schema throughout, so processes migrating at once take turns and each
// migration is applied exactly once. Each migration runs in its own
// transaction together with its record in schema_migrations.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]store.MigrationState, error) {
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	var applied []store.MigrationState
	err = withMigrationLock(ctx, pool, schema, func(conn *pgxpool.Conn) error {
		done, err := appliedVersions(ctx, conn, schema)
		if err != nil {
			return err
		}
		prefix := pgx.Identifier{schema}.Sanitize() + "."
		for _, m := range all {
			if _, ok := done[m.Version]; ok {
				continue
			}
			sql := strings.ReplaceAll(m.SQL, migrations.SchemaMarker, prefix)
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+prefix+"schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
				return err
			})
			if err != nil {
				return errors.Wrapf(err, "apply migration %04d_%s to schema %s", m.Version, m.Name, schema)
			}
			now := time.Now()
			applied = append(applied, store.MigrationState{Version: m.Version, Name: m.Name, AppliedAt: &now})
		}
		return nil
	})
	return applied, err
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

func withMigrationLock(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(*pgxpool.Conn) error) error {
	if err := ValidateSchemaName(schema); err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return errors.Wrap(err, "connect")
	}
	defer conn.Release()
	key := migrationLockKey(schema)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return errors.Wrapf(err, "take migration lock for schema %s", schema)
	}
	defer func() {
		// Unlock even when ctx is done; a dropped connection releases it too.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key)
	}()
	prefix := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+prefix); err != nil {
		return errors.Wrapf(err, "create schema %s", schema)
	}
	_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+prefix+`.schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return errors.Wrapf(err, "create schema_migrations in %s", schema)
	}
	return fn(conn)
}

func appliedVersions(ctx context.Context, conn *pgxpool.Conn, schema string) (map[int]time.Time, error) {
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
