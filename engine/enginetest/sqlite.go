package enginetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/sqlitestore"
)

// migratedSQLite is the file a new embedded store holds once its
// migrations ran, read once per test binary.
var migratedSQLite = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "cairn-sqlite-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "cairn.db")
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		return nil, err
	}
	// Closing the last connection checkpoints the write-ahead log into
	// the file and removes the log, so the file alone is the store.
	if err := s.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the template store's write-ahead log was not checkpointed into its file (stat: %v)", err)
	}
	return os.ReadFile(path)
})

// SQLitePath returns the path of a fresh, migrated embedded store's file
// in a directory of the test's own, for sqlitestore.Open or New. It is a
// copy of a file migrated once per test binary: running the migrations
// costs a new file some 200 ms of CPU under -race, a copy a millisecond,
// and the hundreds of tests on the embedded store add up. Opening it
// checks its migrations as any open does.
func SQLitePath(tb testing.TB) string {
	tb.Helper()
	data, err := migratedSQLite()
	require.NoError(tb, err, "migrate the template embedded store")
	path := filepath.Join(tb.TempDir(), "cairn.db")
	require.NoError(tb, os.WriteFile(path, data, 0o600))
	return path
}

// SQLiteStore opens a fresh, migrated embedded store (see [SQLitePath]),
// closed when the test ends.
func SQLiteStore(tb testing.TB) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), SQLitePath(tb))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
