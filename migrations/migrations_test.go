package migrations_test

import (
	"fmt"
	"testing"
	"testing/fstest"

	"github.com/cairnflow/cairn/migrations"
	"github.com/stretchr/testify/require"
)

func file(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }

func TestAll(t *testing.T) {
	t.Parallel()
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	for i, m := range all {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.Name)
		require.Contains(t, m.SQL, migrations.SchemaMarker, "migration %04d must name tables through the schema marker", m.Version)
	}
}

func TestFromFS(t *testing.T) {
	t.Parallel()

	t.Run("ParsesInVersionOrder", func(t *testing.T) {
		t.Parallel()
		got, err := migrations.FromFS(fstest.MapFS{
			"0002_add_index.up.sql": file("CREATE INDEX b"),
			"0001_init.up.sql":      file("CREATE TABLE a"),
			"0003_x2.up.sql":        file("SELECT 3"),
			"subdir/0009_x.up.sql":  file("ignored: not in the root"),
		})
		require.NoError(t, err)
		require.Equal(t, []migrations.Migration{
			{Version: 1, Name: "init", SQL: "CREATE TABLE a"},
			{Version: 2, Name: "add_index", SQL: "CREATE INDEX b"},
			{Version: 3, Name: "x2", SQL: "SELECT 3"},
		}, got)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		got, err := migrations.FromFS(fstest.MapFS{})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	for name, tt := range map[string]struct {
		fs   fstest.MapFS
		want string
	}{
		"BadName": {fstest.MapFS{"0001_init.up.sql": file(""), "init.sql": file("")}, "name must look like"},
		"Duplicate": {fstest.MapFS{
			"0001_init.up.sql": file(""), "0002_a.up.sql": file(""), "0002_b.up.sql": file(""),
		}, "appears twice"},
		"DuplicateFirst": {fstest.MapFS{"0001_a.up.sql": file(""), "0001_b.up.sql": file("")}, "appears twice"},
		"Gap":            {fstest.MapFS{"0001_init.up.sql": file(""), "0003_c.up.sql": file("")}, "gap"},
		"NoFirst":        {fstest.MapFS{"0002_b.up.sql": file("")}, "gap"},
		"VersionZero":    {fstest.MapFS{"0000_zero.up.sql": file("")}, "positive"},
	} {
		t.Run("Rejects"+name, func(t *testing.T) {
			t.Parallel()
			got, err := migrations.FromFS(tt.fs)
			require.ErrorContains(t, err, tt.want)
			require.Nil(t, got)
		})
	}
}

func TestParseName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file    string
		version int
		name    string
	}{
		{"0001_init.up.sql", 1, "init"},
		{"0042_add_cron_2.up.sql", 42, "add_cron_2"},
		{"9999_z.up.sql", 9999, "z"},
	} {
		v, n, err := migrations.ParseName(tt.file)
		require.NoError(t, err, tt.file)
		require.Equal(t, tt.version, v, tt.file)
		require.Equal(t, tt.name, n, tt.file)
	}
	for _, bad := range []string{
		"", "init.up.sql", "1_init.up.sql", "001_init.up.sql", "00001_init.up.sql",
		"0001_Init.up.sql", "0001-init.up.sql", "0001_init.sql", "0001_init.up.sql.bak",
		"0001_.up.sql", "0001_in it.up.sql", "0001_init.UP.SQL", "0000_zero.up.sql",
		"x0001_init.up.sql", "0001_init.up.sqlx", "0001_init.up.sql\n",
	} {
		_, _, err := migrations.ParseName(bad)
		require.Error(t, err, "%q", bad)
	}
}

func FuzzParseName(f *testing.F) {
	for _, seed := range []string{"0001_init.up.sql", "0000_x.up.sql", "9999_a_b.up.sql", "bad", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, file string) {
		v, name, err := migrations.ParseName(file)
		if err != nil {
			return
		}
		if v < 1 || v > 9999 || name == "" {
			t.Fatalf("ParseName(%q) accepted version %d name %q", file, v, name)
		}
		// An accepted name is exactly the one its parts spell.
		if again := fmt.Sprintf("%04d_%s.up.sql", v, name); again != file {
			t.Fatalf("ParseName(%q) = %d, %q, which spell %q", file, v, name, again)
		}
	})
}

// TestSQLiteMigrationsKeepStepWithPostgreSQL: every schema change is made
// for both stores, under the same version and name.
func TestSQLiteMigrationsKeepStepWithPostgreSQL(t *testing.T) {
	t.Parallel()
	pg, err := migrations.All()
	require.NoError(t, err)
	lite, err := migrations.SQLite()
	require.NoError(t, err)
	names := func(ms []migrations.Migration) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
		}
		return out
	}
	require.Equal(t, names(pg), names(lite), "migrations/sqlite must have a file for each PostgreSQL migration, and no other")
	for _, m := range lite {
		require.NotContains(t, m.SQL, migrations.SchemaMarker, "SQLite migration %04d: a SQLite file holds one cairn; no schema marker", m.Version)
	}
}
