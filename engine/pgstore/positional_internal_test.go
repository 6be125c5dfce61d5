package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Every statement the store loads (and the hot functions' calls) is
// rewritten once, to exactly what pgx.NamedArgs makes of it at each call:
// the same text, the same values in the same order, nil for a name not
// given.
func TestPositionalsAreWhatPgxMakes(t *testing.T) {
	t.Parallel()
	queries, err := loadQueries("cairn")
	require.NoError(t, err)
	for _, f := range hotFunctions(queries) {
		queries[f.query+" (hot)"] = f.call("cairn")
	}
	pos := newPositionals(queries)
	for name, sql := range queries {
		names := namedArgs(sql)
		require.NotNil(t, names, "%s: its arguments are ordered", name)
		args := pgx.NamedArgs{}
		for i, n := range names {
			if i > 0 { // the first left out: nil, as pgx gives it
				args[n] = i
			}
		}
		wantSQL, wantValues, err := args.RewriteQuery(context.Background(), nil, sql, nil)
		require.NoError(t, err, name)
		got := pos.args(sql, []any{args})
		require.Len(t, got, 1, name)
		rewriter, ok := got[0].(pgx.QueryRewriter)
		require.True(t, ok, "%s: bound to its positional form", name)
		gotSQL, gotValues, err := rewriter.RewriteQuery(context.Background(), nil, sql, nil)
		require.NoError(t, err, name)
		require.Equal(t, wantSQL, gotSQL, name)
		require.Equal(t, wantValues, gotValues, name)
	}
	require.Equal(t, []any{1, 2}, pos.args("SELECT $1, $2", []any{1, 2}), "positional arguments pass through")
	unknown := pgx.NamedArgs{"a": 1}
	require.Equal(t, []any{unknown}, pos.args("SELECT @a", []any{unknown}), "a statement the store did not load is pgx's to rewrite")
}
