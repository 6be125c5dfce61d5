package bench

import (
	"regexp"
	"slices"
	"testing"

	"github.com/cairnflow/cairn/internal/namedsql"
	"github.com/stretchr/testify/require"
)

// TestQueryFiles checks the embedded query files: each statement the bench
// names is there, no other, and the PostgreSQL ones name their tables
// through the schema markers, which newBenchSQL replaces.
func TestQueryFiles(t *testing.T) {
	t.Parallel()
	pg, err := pgQueries()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"ServerVersion", "SchemaContents", "SchemaDrop", "TaskForeignExists", "TablesAnalyze",
		"TaskUnfinishedExists", "TaskUnfinishedCount", "DrainSummary", "TaskPrefillFinished",
		"AuditFill", "AuditSummarizeBRIN", "EventCount",
	}, keys(pg))
	lite, err := liteQueries()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"TablesAnalyze", "TaskUnfinishedExists", "TaskUnfinishedCount", "DrainSummary"}, keys(lite))

	b, err := newBenchSQL(nil, "cairn_bench")
	require.NoError(t, err)
	for name, q := range b.queries {
		require.NotContains(t, q, "TEMPLATE", "query %s", name)
		require.NotContains(t, q, "\n--", "query %s keeps a comment line", name)
		require.NotRegexp(t, unqualifiedTable, q, "query %s names a table without the schema", name)
	}
	require.Equal(t, `DROP SCHEMA "cairn_bench" CASCADE;`, b.q("SchemaDrop"))
}

// unqualifiedTable matches a cairn table named without a schema.
var unqualifiedTable = regexp.MustCompile(`(?i)(FROM|INTO|ANALYZE|,)\s+(tasks|events)\b`)

func TestParseQueriesRefusesADuplicate(t *testing.T) {
	t.Parallel()
	err := namedsql.Parse("-- name: A\nSELECT 1;\n-- name: A\nSELECT 2;\n", map[string]string{})
	require.ErrorContains(t, err, "query A defined twice")
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
