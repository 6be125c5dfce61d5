package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newNamespaceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "namespace", Short: "Namespaces: retention of finished tasks and of their idempotency keys"}
	cmd.AddCommand(newNamespaceSetCmd(g), newNamespaceListCmd(g), newNamespaceMoveCmd(g))
	return cmd
}

func newNamespaceSetCmd(g *globals) *cobra.Command {
	var retention, keyRetention, streamTTL retentionFlag
	var archive string
	var typeRetention []string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a namespace's retention (how long finished tasks are kept) and key retention",
		Long: `Sets how long after they finished the namespace's tasks are kept: the
leader (in cairn server, or any worker's rescuer) then removes them whole,
with their history. A removed task's idempotency key stays taken for
--key-retention after the removal, so a late duplicate start still names it.
Durations are Go durations with days allowed: 30d, 36h, 1d12h, 90s. A flag
not given keeps the namespace's current setting; 0 takes the default of the process that runs the leader (none, and 24h, unless
cairn server --default-retention / --default-key-retention say otherwise).
--type-retention TYPE=DURATION (repeatable) gives a task type a retention
of its own, in place of the namespace's for its tasks; TYPE=default
removes it.

With --placement it works in NAME's cell.`,
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{cellOfArgAnnotation: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeDB, err := g.clientCreating(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			// A flag not given keeps the namespace's setting.
			s, err := currentSettings(cmd, c, args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("retention") {
				s.Retention = time.Duration(retention)
			}
			if cmd.Flags().Changed("key-retention") {
				s.KeyRetention = time.Duration(keyRetention)
			}
			if cmd.Flags().Changed("stream-ttl") {
				s.StreamTTL = time.Duration(streamTTL)
			}
			if cmd.Flags().Changed("archive") {
				s.Archive = ""
				if archive != "" {
					if s.Archive, err = archiveLocation(archive); err != nil {
						return err
					}
				}
			}
			if s.TypeRetention, err = applyTypeRetention(s.TypeRetention, typeRetention); err != nil {
				return err
			}
			if err := c.SetNamespace(cmd.Context(), args[0], s); err != nil {
				return err
			}
			line := fmt.Sprintf("namespace %s: retention %s, key retention %s, archive %s",
				args[0], retentionText(s.Retention), retentionText(s.KeyRetention), archiveText(s.Archive))
			if len(s.TypeRetention) > 0 {
				line += ", types " + typeRetentionText(s.TypeRetention)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&typeRetention, "type-retention", nil, "TYPE=DURATION: a task type's own retention, e.g. report.render=7d (TYPE=default removes it); repeatable")
	cmd.Flags().Var(&retention, "retention", "how long finished tasks are kept, e.g. 30d (0: the default)")
	cmd.Flags().Var(&keyRetention, "key-retention", "how long a removed task's idempotency key stays taken, e.g. 24h (0: the default)")
	cmd.Flags().Var(&streamTTL, "stream-ttl", "how long tasks' stream entries are kept after they were written, e.g. 7d (0: as long as their tasks)")
	cmd.Flags().StringVar(&archive, "archive", "", `where the histories of removed tasks are written first: a directory or s3://bucket/prefix?endpoint=host:port ("": the leader's default, --default-archive)`)
	return cmd
}

// currentSettings returns namespace's settings (zero when it has none).
func currentSettings(cmd *cobra.Command, c *sdk.Client, namespace string) (sdk.NamespaceSettings, error) {
	ns, err := c.NamespaceConfig(cmd.Context(), namespace)
	return sdk.NamespaceSettings{Retention: ns.Retention, KeyRetention: ns.KeyRetention, Archive: ns.Archive, TypeRetention: ns.TypeRetention,
		StreamTTL: ns.StreamTTL}, err
}

// applyTypeRetention returns current with the --type-retention flags
// applied: TYPE=DURATION sets a type's own retention, TYPE=default removes
// it.
func applyTypeRetention(current map[string]time.Duration, flags []string) (map[string]time.Duration, error) {
	if len(flags) == 0 {
		return current, nil
	}
	out := make(map[string]time.Duration, len(current)+len(flags))
	maps.Copy(out, current)
	for _, f := range flags {
		typ, value, ok := strings.Cut(f, "=")
		if !ok || typ == "" {
			return nil, errmark.Mark(errors.Newf("--type-retention %q: use TYPE=DURATION (e.g. report.render=7d) or TYPE=default", f), configError)
		}
		if value == "default" {
			delete(out, typ)
			continue
		}
		d, err := parseRetention(value)
		if err != nil || d <= 0 {
			return nil, errmark.Mark(errors.Newf("--type-retention %q: %q is not a positive duration (30d, 36h, 90s) or default", f, value), configError)
		}
		out[typ] = d
	}
	return out, nil
}

// typeRetentionText shows per-type retentions, by type: "a=7d b=36h".
func typeRetentionText(m map[string]time.Duration) string {
	types := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(types))
	for i, typ := range types {
		parts[i] = typ + "=" + retentionText(m[typ])
	}
	return strings.Join(parts, " ")
}

// namespaceView is a namespace as `cairn namespace list -o json` prints
// it: durations in seconds, 0 for the default.
type namespaceView struct {
	Name                string  `json:"name"`
	RetentionSeconds    float64 `json:"retention_seconds"`
	KeyRetentionSeconds float64 `json:"key_retention_seconds"`
	// OldestFinishedAt is when the oldest finished task still kept
	// finished (absent: none is kept).
	OldestFinishedAt *time.Time `json:"oldest_finished_at,omitempty"`
	Archive          string     `json:"archive,omitempty"`
	// TypeRetentionSeconds are the task types with a retention of their
	// own.
	TypeRetentionSeconds map[string]float64 `json:"type_retention_seconds,omitempty"`
	// Cell is the cell holding the namespace's row, with --placement.
	Cell     string `json:"cell,omitempty"`
	settings cairntype.NamespaceConfig
}

// moveView is what cairn namespace move reports (-o json).
type moveView struct {
	Namespace      string           `json:"namespace"`
	From           string           `json:"from"`
	To             string           `json:"to"`
	Rows           map[string]int64 `json:"rows"`
	DrainedSeconds float64          `json:"drained_seconds"`
	PausedSeconds  float64          `json:"paused_seconds"`
	Resumed        bool             `json:"resumed"`
}

func newNamespaceMoveCmd(g *globals) *cobra.Command {
	var to string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "move NAMESPACE --to CELL",
		Short: "Move a namespace's tasks, histories, schedules and settings to another cell of --placement",
		Long: "Move a namespace between two cells of --placement: its new tasks and claims are refused in its cell, its running " +
			"attempts end, then every row of it is copied to --to in one transaction and removed from its cell. " +
			"Then place it in --to in the placement map and roll the map out: until then, processes on the old map answer " +
			"its requests with 503 (it has moved). See docs/deployment.md, \"Moving a namespace\".",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{everyCellAnnotation: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return moveNamespace(cmd, g, args[0], to, drain)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the cell of --placement to move the namespace to")
	cmd.Flags().DurationVar(&drain, "drain-timeout", pgstore.DefaultMoveDrainTimeout, "how long to wait for its running attempts; past it the move is undone")
	return cmd
}

// moveNamespace runs cairn namespace move.
func moveNamespace(cmd *cobra.Command, g *globals, ns, to string, drain time.Duration) error {
	if !g.everyCell() {
		return errmark.Mark(errors.New("--placement is required: a namespace moves between two cells of the placement map"), configError)
	}
	if err := sdk.ValidateName("namespace", ns); err != nil {
		return errmark.Mark(err, configError)
	}
	from, ok := g.cells.Namespaces[ns]
	switch {
	case !ok:
		return errmark.Mark(errors.Newf("namespace %q is in no cell of the placement map", ns), configError)
	case to == "":
		return errmark.Mark(errors.New("--to is required: the cell to move the namespace to"), configError)
	case g.cells.Cells[to].URL == "":
		return errmark.Mark(errors.Newf("--to %q: the placement map has no such cell (it has %s)", to,
			strings.Join(slices.Sorted(maps.Keys(g.cells.Cells)), ", ")), configError)
	case from == to:
		return errmark.Mark(errors.Newf("namespace %q is in cell %q already", ns, to), configError)
	case drain <= 0:
		return errmark.Mark(errors.Newf("--drain-timeout %s: use a positive duration", drain), configError)
	}
	pooler, err := pgstore.ParsePooler(g.pooler)
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--pooler"), configError)
	}
	opened, err := pgstore.OpenCells(cmd.Context(), g.cells, pgstore.CellOptions{Schema: g.schema, Pool: pgstore.PoolOptions{MaxConns: 4, Pooler: pooler}})
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "--placement"), configError)
	}
	defer opened.Close()
	src, _ := opened.Stores[from].(*pgstore.Store)
	dst, _ := opened.Stores[to].(*pgstore.Store)
	logf := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
	report, err := pgstore.MoveNamespace(cmd.Context(), src, dst, pgstore.MoveParams{Namespace: ns, ToCell: to, DrainTimeout: drain, Logf: logf})
	if err != nil {
		return err
	}
	view := moveView{Namespace: ns, From: from, To: to, Rows: report.Rows, DrainedSeconds: report.Drained.Seconds(),
		PausedSeconds: report.Paused.Seconds(), Resumed: report.Resumed}
	if g.output == "json" {
		return printJSON(cmd, view)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "moved namespace %s from cell %s to cell %s: %d tasks, %d events; its starts and claims paused %s (running attempts drained in %s)\n",
		ns, from, to, report.Rows["tasks"], report.Rows["events"], report.Paused.Round(time.Millisecond), report.Drained.Round(time.Millisecond))
	fmt.Fprintf(cmd.OutOrStdout(), "now place it in cell %s in the placement map (\"namespaces\": {\"%s\": \"%s\"}) and roll the map out\n", to, ns, to)
	return nil
}

// namespaceListHeader heads cairn namespace list's table.
const namespaceListHeader = "NAMESPACE\tRETENTION\tKEY RETENTION\tOLDEST FINISHED\tARCHIVE\tTYPES\tCELL"

func newNamespaceListCmd(g *globals) *cobra.Command {
	cmd := listCmd(g, "list", "List the namespaces with settings or finished tasks, and their retention; with --placement, every cell's",
		namespaceListHeader,
		func(c *sdk.Client, ctx context.Context) ([]namespaceView, error) {
			namespaces, err := c.Namespaces(ctx)
			return namespaceViews(namespaces), err
		},
		namespaceRow)
	// With --placement it lists every cell's namespaces, through a client
	// over all the cells; a cell that does not answer is named in the
	// error, after the others' rows.
	cmd.Annotations = map[string]string{everyCellAnnotation: "yes"}
	inOneStore := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !g.everyCell() {
			return inOneStore(cmd, args)
		}
		// A cell that does not answer is opened all the same (the listing
		// names it in its error, so no warning of it here).
		cells, closeCells, err := g.openCells(cmd.Context(), storeOpts{existing: true, maxConns: 2, cellsDown: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		defer closeCells()
		namespaces, readErr := cells.ListNamespaces(cmd.Context())
		return printList(cmd, g, namespaceListHeader, namespaceViews(namespaces), readErr, namespaceRow)
	}
	return cmd
}

// namespaceViews shows namespaces as cairn namespace list does.
func namespaceViews(namespaces []cairntype.NamespaceConfig) []namespaceView {
	views := make([]namespaceView, len(namespaces))
	for i, ns := range namespaces {
		views[i] = namespaceView{Name: ns.Name, RetentionSeconds: ns.Retention.Seconds(),
			KeyRetentionSeconds: ns.KeyRetention.Seconds(), Archive: ns.Archive, Cell: ns.Cell, settings: ns}
		if !ns.OldestFinished.IsZero() {
			at := ns.OldestFinished.UTC()
			views[i].OldestFinishedAt = &at
		}
		for typ, d := range ns.TypeRetention {
			if views[i].TypeRetentionSeconds == nil {
				views[i].TypeRetentionSeconds = map[string]float64{}
			}
			views[i].TypeRetentionSeconds[typ] = d.Seconds()
		}
	}
	return views
}

// namespaceRow is a namespace's row of cairn namespace list's table.
func namespaceRow(v namespaceView) string {
	oldest := "-"
	if v.OldestFinishedAt != nil {
		oldest = v.OldestFinishedAt.Format(time.RFC3339)
	}
	types := "-"
	if len(v.settings.TypeRetention) > 0 {
		types = typeRetentionText(v.settings.TypeRetention)
	}
	cell := "-"
	if v.Cell != "" {
		cell = v.Cell
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", v.Name, retentionText(v.settings.Retention), retentionText(v.settings.KeyRetention), oldest,
		archiveText(v.Archive), types, cell)
}

// archiveText shows an archive setting.
func archiveText(location string) string {
	if location == "" {
		return "default"
	}
	return location
}

// retentionText shows a retention in days where it is whole days.
func retentionText(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "default"
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// retentionFlag is a duration flag that also takes days ("30d", "1d12h").
type retentionFlag time.Duration

func (f *retentionFlag) String() string { return retentionText(time.Duration(*f)) }
func (f *retentionFlag) Type() string   { return "duration" }

func (f *retentionFlag) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*f = retentionFlag(d)
	return nil
}

// parseRetention parses a Go duration that may start with whole days.
func parseRetention(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty: give a duration such as 30d, 36h, 1d12h or 90s (0: the default)")
	}
	var days time.Duration
	rest := s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil {
			return 0, errors.Newf("%q: days are a whole number before the d, as in 30d or 1d12h", s)
		}
		days, rest = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, errors.Newf("%q: not a duration (use 30d, 36h, 1d12h, 90s)", s)
		}
	}
	if d < 0 {
		return 0, errors.Newf("%q: a retention is not negative (0: the default)", s)
	}
	if total := days + d; total >= days {
		return total, nil
	}
	return 0, errors.Newf("%q: too long (at most about 290 years)", s)
}
