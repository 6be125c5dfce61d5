package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply or inspect cairn's schema migrations"}
	cmd.AddCommand(&cobra.Command{
		Use:         "up",
		Short:       "Apply pending migrations (safe to run from several processes at once); with --placement, to every cell",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{everyCellAnnotation: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.everyCell() {
				return migrateCells(cmd, g)
			}
			if g.embedded() {
				// The embedded store applies its migrations when it opens.
				states, err := embeddedMigrations(cmd, g)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd, migrationRows(states))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "embedded store %s is up to date (%d migrations)\n", g.dbPath, len(states))
				return nil
			}
			pool, err := g.connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			applied, err := pgstore.Migrate(cmd.Context(), pool, g.schema)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, migrationRows(applied))
			}
			if len(applied) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "schema %s is up to date\n", g.schema)
			}
			for _, m := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %04d_%s to schema %s\n", m.Version, m.Name, g.schema)
			}
			return nil
		},
	}, &cobra.Command{
		Use:         "status",
		Short:       "List migrations and whether each is applied; with --placement, in every cell",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{everyCellAnnotation: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.everyCell() {
				return cellsMigrationStatus(cmd, g)
			}
			var states []store.MigrationState
			var err error
			if g.embedded() {
				states, err = embeddedMigrations(cmd, g)
			} else {
				states, err = pgMigrationStatus(cmd, g)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, migrationRows(states))
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED AT")
			for _, m := range states {
				at := "pending"
				if m.AppliedAt != nil {
					at = m.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%04d\t%s\t%s\n", m.Version, m.Name, at)
			}
			return w.Flush()
		},
	})
	return cmd
}

type migrationRow struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at"`
}

func migrationRows(states []store.MigrationState) []migrationRow {
	out := make([]migrationRow, 0, len(states))
	for _, m := range states {
		out = append(out, migrationRow{Version: m.Version, Name: m.Name, Applied: m.AppliedAt != nil, AppliedAt: m.AppliedAt})
	}
	return out
}

// pgMigrationStatus lists PostgreSQL's migrations and which are applied to
// the schema.
func pgMigrationStatus(cmd *cobra.Command, g *globals) ([]store.MigrationState, error) {
	pool, err := g.connect(cmd.Context(), 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return pgstore.MigrationStatus(cmd.Context(), pool, g.schema)
}

// embeddedMigrations opens the embedded store (which migrates it) and lists
// its migrations.
func embeddedMigrations(cmd *cobra.Command, g *globals) ([]store.MigrationState, error) {
	store, err := sqlitestore.Open(cmd.Context(), g.dbPath)
	if err != nil {
		return nil, errmark.Mark(errors.Wrapf(err, "--db %s", g.dbPath), configError)
	}
	defer func() { _ = store.Close() }()
	return store.MigrationStatus(cmd.Context())
}

// migrateCells applies the migrations to every cell of --placement, one
// after the other, each under its own lock, and reports each.
func migrateCells(cmd *cobra.Command, g *globals) error {
	return eachCell(cmd, g, "migrate", pgstore.Migrate, func(name string, states []store.MigrationState) {
		if len(states) == 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "cell %s: schema %s is up to date\n", name, g.schema)
		}
		for _, m := range states {
			fmt.Fprintf(cmd.OutOrStdout(), "cell %s: applied %04d_%s to schema %s\n", name, m.Version, m.Name, g.schema)
		}
	})
}

// cellsMigrationStatus lists every cell's migrations, a table per cell.
func cellsMigrationStatus(cmd *cobra.Command, g *globals) error {
	w := newTable(cmd)
	fmt.Fprintln(w, "CELL\tVERSION\tNAME\tAPPLIED AT")
	err := eachCell(cmd, g, "migrate status", pgstore.MigrationStatus, func(name string, states []store.MigrationState) {
		for _, m := range states {
			at := "pending"
			if m.AppliedAt != nil {
				at = m.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%04d\t%s\t%s\n", name, m.Version, m.Name, at)
		}
	})
	if g.output != "json" {
		if flushErr := w.Flush(); err == nil {
			err = flushErr
		}
	}
	return err
}

// eachCell runs do on every cell of --placement, one after the other, and
// shows each cell's migrations (as text by show, or all of them as one JSON
// object by cell); a cell that fails does not stop the others, and the
// error names every one that did.
func eachCell(cmd *cobra.Command, g *globals, what string,
	do func(context.Context, *pgxpool.Pool, string) ([]store.MigrationState, error),
	show func(cell string, states []store.MigrationState)) error {
	pooler, err := pgstore.ParsePooler(g.pooler)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--pooler"), configError)
	}
	byCell := map[string][]migrationRow{}
	var failed []string
	for _, name := range slices.Sorted(maps.Keys(g.cells.Cells)) {
		states, err := inCell(cmd.Context(), g.cells.Cells[name], g.schema, pooler, do)
		if err != nil {
			failed = append(failed, fmt.Sprintf("cell %q: %s", name, err))
			continue
		}
		byCell[name] = migrationRows(states)
		if g.output != "json" {
			show(name, states)
		}
	}
	if g.output == "json" {
		if err := printJSON(cmd, byCell); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return errors.Newf("%s: %s", what, strings.Join(failed, "; "))
	}
	return nil
}

// inCell opens a small pool on cell and runs do on its schema.
func inCell(ctx context.Context, cell pgstore.Cell, schema string, pooler pgstore.Pooler,
	do func(context.Context, *pgxpool.Pool, string) ([]store.MigrationState, error)) ([]store.MigrationState, error) {
	openCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgstore.OpenPool(openCtx, cell.URL, pgstore.PoolOptions{MaxConns: 2, Pooler: pooler})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return do(ctx, pool, schema)
}
