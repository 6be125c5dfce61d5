package pgstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHotFunctionArguments: every hot statement's named arguments are
// ordered as pgx numbers them, and a statement whose names the pattern and
// pgx disagree on gets no function.
func TestHotFunctionArguments(t *testing.T) {
	t.Parallel()
	queries, err := loadQueries(DefaultSchema)
	require.NoError(t, err)
	require.Len(t, hotFunctions(queries), len(hotQueries), "every hot statement has a function")
	require.Equal(t, []string{"b", "a"}, namedArgs("SELECT @b, @a::int, @b -- @c\nFROM t WHERE x = '@d'"))
	require.Nil(t, namedArgs("SELECT @a::int /* @b */"), "pgx skips block comments; the pattern does not")
}

// TestHotFunctionNamesFollowTheSchemaVersion: a function's types are the
// tables' when it was made, so a new migration names new functions even
// where a statement's text is unchanged.
func TestHotFunctionNamesFollowTheSchemaVersion(t *testing.T) {
	t.Parallel()
	const sql = "SELECT @a::int"
	require.Equal(t, newHotFunction("Q", sql, 16).name, newHotFunction("Q", sql, 16).name)
	require.NotEqual(t, newHotFunction("Q", sql, 16).name, newHotFunction("Q", sql, 17).name)
	require.NotEqual(t, newHotFunction("Q", sql, 16).name, newHotFunction("Q", sql+" + 1", 16).name)
}
