package main

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/cairnflow/cairn/migrations"
)

// TestMigratingKeepsEveryHistory: a schema as the release before the
// latest migration left it, holding tasks whose histories have every event
// type between them (finished tasks and tasks in flight), written as that
// shape stores them, then migrated to the latest: every task's replay, its
// projection row and `cairn task history` (table and JSON) are the same
// after as before. A migration that changes how tasks or events are
// stored must keep this green.
func TestMigratingKeepsEveryHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := enginetest.Pool(t)
	schema := enginetest.UnmigratedSchema(t)
	all, err := migrations.All()
	require.NoError(t, err)
	_, err = pgstore.MigrateTo(ctx, pool, schema, all[len(all)-2].Version)
	require.NoError(t, err)

	type task struct {
		id        uuid.UUID
		namespace string
	}
	var tasks []task
	for _, events := range everyEventType(t) {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		st := enginetest.WriteHistory(t, pool, schema, id, events)
		tasks = append(tasks, task{id, st.Scheduled.Namespace})
	}
	t.Logf("%d tasks hold the %d event types", len(tasks), len(history.Types))
	s, err := pgstore.New(pgstore.Config{Pool: pool, Schema: schema})
	require.NoError(t, err)

	type seen struct {
		replay      history.State
		table, json string
	}
	look := func() map[uuid.UUID]seen {
		require.Equal(t, len(tasks), enginetest.RequireProjectionsMatch(t, s), "every task's row is its replay")
		out := map[uuid.UUID]seen{}
		for _, tk := range tasks {
			st, err := history.Replay(enginetest.Events(t, s, tk.id))
			require.NoError(t, err)
			tg := cliTarget{flags: []string{"--database-url", enginetest.DatabaseURL(t), "--schema", schema, "--namespace", tk.namespace}}
			table, _ := tg.mustRun(t, "task", "history", tk.id.String())
			js, _ := tg.mustRun(t, "task", "history", tk.id.String(), "-o", "json")
			out[tk.id] = seen{st, table, js}
		}
		return out
	}
	before := look()
	applied, err := pgstore.Migrate(ctx, pool, schema)
	require.NoError(t, err)
	require.Len(t, applied, 1, "the latest migration ran on the tasks")
	after := look()
	for _, tk := range tasks {
		require.Equal(t, before[tk.id], after[tk.id], "task %s", tk.id)
	}
}

// everyEventType returns generated histories, finished and in flight,
// that between them hold every event type: for each type the first
// history found with it, and the first few that stop part-way.
func everyEventType(t *testing.T) [][]history.Event {
	t.Helper()
	var out [][]history.Event
	covered := map[history.Type]bool{}
	inFlight := 0
	for seed := uint64(0); len(covered) < len(history.Types) || inFlight < 4; seed++ {
		require.Less(t, seed, uint64(10_000), "the generator misses a type: have %d of %d", len(covered), len(history.Types))
		events := historytest.FromSeed(seed, historytest.Opts{})
		st, err := history.Replay(events)
		require.NoError(t, err)
		adds := false
		for _, e := range events {
			if !covered[e.Type()] {
				covered[e.Type()], adds = true, true
			}
		}
		if !st.Status.Terminal() && inFlight < 4 {
			inFlight, adds = inFlight+1, true
		}
		if adds {
			out = append(out, events)
		}
	}
	return out
}
