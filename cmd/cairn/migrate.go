package main

import (
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply or inspect cairn's schema migrations"}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations (safe to run from several processes at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
