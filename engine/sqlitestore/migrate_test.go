package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/migrations"
)

// A file's migrations are read at every open: one that lacks its record
// is applied, whatever records a newer release left above the known
// versions, and a migration that fails is named with the file and
// leaves the records as they were.
func TestOpenAppliesTheMigrationAFileLacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all, err := migrations.SQLite()
	require.NoError(t, err)
	last := all[len(all)-1]
	path := filepath.Join(t.TempDir(), "cairn.db")
	s, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	// The last migration's record gone, a newer release's record added:
	// the count of records is still len(all).
	_, err = db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = ?", last.Version)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_a_newer_release', 0)", last.Version+1)
	require.NoError(t, err)

	s, err = sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ?", last.Version).Scan(&n))
	require.Equal(t, 1, n, "the open applied the migration the file lacked")

	// The first migration's tables are there: applying it again fails,
	// and the open says which migration of which file.
	first := all[0]
	_, err = db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = ?", first.Version)
	require.NoError(t, err)
	_, err = sqlitestore.Open(ctx, path)
	require.ErrorContains(t, err, fmt.Sprintf("migrate SQLite store %s: apply SQLite migration %04d_%s", path, first.Version, first.Name))
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n))
	require.Equal(t, len(all), n, "the failed open left the records as they were")
}
