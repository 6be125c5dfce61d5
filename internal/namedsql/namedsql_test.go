package namedsql

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		src  string
		want map[string]string
		err  string
	}{
		{
			name: "statements split at name lines, comment lines dropped",
			src:  "-- header\n\n-- name: A\n-- about A\nSELECT 1;\n\n-- name: B\nSELECT @x\n  FROM t; -- trailing\n",
			want: map[string]string{"A": "SELECT 1;", "B": "SELECT @x\n  FROM t; -- trailing"},
		},
		{name: "a name defined twice", src: "-- name: A\nSELECT 1;\n-- name: A\nSELECT 2;", err: "query A defined twice"},
		{name: "an empty statement", src: "-- name: A\n-- nothing\n-- name: B\nSELECT 1;", err: "query A is empty"},
		{name: "an empty last statement", src: "-- name: A\nSELECT 1;\n-- name: B\n", err: "query B is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			err := Parse(tt.src, got)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"a.sql": {Data: []byte("-- name: A\nSELECT 1")},
		"b.sql": {Data: []byte("-- name: B\nSELECT 2")},
		"c.txt": {Data: []byte("-- name: C\nSELECT 3")},
	}
	got, err := Load(fsys, "*.sql")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"A": "SELECT 1", "B": "SELECT 2"}, got)

	_, err = Load(fstest.MapFS{"a.sql": fsys["a.sql"], "b.sql": {Data: []byte("-- name: A\nSELECT 2")}}, "*.sql")
	require.ErrorContains(t, err, "query file b.sql: query A defined twice", "a name is unique across files")
	_, err = Load(fsys, "missing.sql")
	require.ErrorContains(t, err, "no query file matches missing.sql")
}
