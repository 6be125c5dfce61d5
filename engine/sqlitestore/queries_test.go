package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseQueries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		src  string
		want map[string]string
		err  string
	}{
		{
			name: "statements split at name lines, comments and closing semicolons dropped",
			src:  "-- header\n\n-- name: A\n-- about A\nSELECT 1;\n\n-- name: B\nSELECT ?\n  FROM t; -- trailing\n",
			want: map[string]string{"A": "SELECT 1", "B": "SELECT ?\n  FROM t; -- trailing"},
		},
		{
			name: "column markers filled in",
			src:  "-- name: A\nSELECT /* SCHEDULE_COLUMNS */ FROM schedules;",
			want: map[string]string{"A": "SELECT " + scheduleColumns + " FROM schedules"},
		},
		{name: "a name defined twice", src: "-- name: A\nSELECT 1;\n-- name: A\nSELECT 2;", err: "query A defined twice"},
		{name: "an unknown marker", src: "-- name: A\nSELECT /* TASK_COLUMN */ FROM tasks;", err: "query A: unknown marker /* TASK_COLUMN */"},
		{name: "an empty statement", src: "-- name: A\n-- nothing\n-- name: B\nSELECT 1;", err: "query A is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseQueries(tt.src)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func newInternalStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "cairn.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Every statement of the query files prepares against the migrated
// schema, the ones a test run may not reach too, and its markers are
// filled in.
func TestEveryQueryPrepares(t *testing.T) {
	t.Parallel()
	s := newInternalStore(t)
	require.NotEmpty(t, s.cache.queries)
	for name, text := range s.cache.queries {
		require.NotContains(t, text, "/*", "query %s: a marker left", name)
		st, err := s.db.PrepareContext(context.Background(), text)
		require.NoError(t, err, "query %s", name)
		require.NoError(t, st.Close())
	}
}

func TestUnknownQueryPanicsWithItsName(t *testing.T) {
	t.Parallel()
	s := newInternalStore(t)
	require.PanicsWithValue(t, "sqlitestore: unknown query NoSuchQuery", func() {
		_, _ = s.q.exec(context.Background(), "NoSuchQuery")
	})
	require.PanicsWithValue(t, "sqlitestore: unknown query NoSuchQuery", func() {
		_ = s.tx(context.Background(), func(tx *txn) error {
			_, err := tx.exec(context.Background(), "NoSuchQuery")
			return err
		})
	})
	require.NoError(t, s.Ping(context.Background()), "the panic left no transaction open")
	_, err := s.Version(context.Background())
	require.NoError(t, err)
}

// What jsonStrings encodes, json_each gives back byte for byte: quotes,
// backslashes, control characters, multibyte and invalid UTF-8.
func TestJSONStringsRoundTripThroughJSONEach(t *testing.T) {
	t.Parallel()
	s := newInternalStore(t)
	ctx := context.Background()
	for _, in := range [][]string{
		{},
		{""},
		{"q", "default"},
		{`a"b`, `c\d`, "e\nf\tg\x00h\x1f", "ünïcødé ✓", "<&>", "\xff\xfe"},
		{strings.Repeat("x", 10000)},
	} {
		rows, err := s.db.QueryContext(ctx, "SELECT value FROM json_each(?) ORDER BY key", jsonStrings(in))
		require.NoError(t, err, "%q", in)
		got := []string{}
		for rows.Next() {
			var v []byte
			require.NoError(t, rows.Scan(&v))
			got = append(got, string(v))
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, in, got)
	}
}

// A claim walks its indexes in order and stops at its limit, so its cost
// does not grow with the backlog (pickDue): neither walk sorts the due
// tasks it finds. SQLite's planner, left to itself, took ClaimWalkByPriority
// as a range on tasks_age_idx and sorted every due task (a temp B-tree):
// ten thousand due tasks made each claim a sort of ten thousand rows.
func TestClaimWalksFollowTheirIndexes(t *testing.T) {
	t.Parallel()
	s := newInternalStore(t)
	// With no task excluded and with some (TaskClaimParams.Exclude).
	for _, exclude := range []string{"[]", `["01a24b40-bbc5-7d89-804d-d61d0bc247af"]`} {
		for walk, index := range map[string]string{"ClaimWalkByPriority": "tasks_claim_idx", "ClaimWalkByAge": "tasks_age_idx"} {
			rows, err := s.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+s.cache.queries[walk],
				"default", "default", "doc", 1, 0, 0, exclude, 10)
			require.NoError(t, err, walk)
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &unused, &detail), walk)
				plan = append(plan, detail)
			}
			require.NoError(t, rows.Err(), walk)
			require.NoError(t, rows.Close())
			joined := strings.Join(plan, "\n")
			require.Contains(t, joined, "USING INDEX "+index, walk)
			require.NotContains(t, joined, "TEMP B-TREE", "%s sorts what it walks", walk)
		}
	}
}
