package bench

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
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
		"TaskWaitingCount", "TablesVacuum", "StatReads", "StatDatabase", "TaskClaimLatency",
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

// TestPrefillFinished puts finished ballast tasks in a migrated schema (the
// drain's --finished): each a completed task with the four events a
// one-step task leaves. It failed on every run once migration 0005 made
// fair_at NOT NULL, and nothing ran it.
func TestPrefillFinished(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	b, err := newBenchSQL(s.Pool(), s.Schema())
	require.NoError(t, err)
	require.NoError(t, b.prefillFinished(context.Background(), 3))
	require.Equal(t, 3, enginetest.CountRows(t, s, "tasks"))
	require.Equal(t, 12, enginetest.CountRows(t, s, "events"))
	sum, err := b.drainSummary(context.Background())
	require.NoError(t, err)
	require.Zero(t, sum.completed, "ballast is not counted as the drain's")

	// The ballast's ids are UUIDv7 of a day ago, as the engine makes ids:
	// older than any task started now, so a newest-first listing meets
	// the run's tasks before the ballast.
	rows, err := s.Pool().Query(context.Background(), "SELECT id FROM "+pgx.Identifier{s.Schema(), "tasks"}.Sanitize())
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	now, err := uuid.NewV7()
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, uuid.Version(7), id.Version(), "ballast id %s", id)
		sec, nsec := id.Time().UnixTime()
		age := time.Since(time.Unix(sec, nsec))
		require.InDelta(t, 24*time.Hour, age, float64(time.Hour), "ballast id %s is %s old", id, age)
		require.Negative(t, bytes.Compare(id[:], now[:]), "ballast id %s sorts before a new task's", id)
	}
}

// TestResetTakesAMigratedSchemaForItsOwn resets a schema migrated to the
// newest version twice: every table the migrations create must be on
// SchemaContents' list of cairn's, or the bench refuses its own schema
// (as it did once migration 0010 added two tables).
func TestResetTakesAMigratedSchemaForItsOwn(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	b, err := newBenchSQL(s.Pool(), s.Schema())
	require.NoError(t, err)
	migrate := func(ctx context.Context) error {
		_, err := pgstore.Migrate(ctx, s.Pool(), s.Schema())
		return err
	}
	require.NoError(t, b.reset(context.Background(), migrate))
	require.NoError(t, b.reset(context.Background(), migrate), "a schema the bench migrated is the bench's")
}
