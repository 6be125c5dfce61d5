package main

import (
	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

const replayLong = `Replays recorded histories against the workflow definitions compiled into
this binary, without running a step, and lists each history that would not
replay: the task, its type and version, where the workflow parts from its
record (a step, a receive or a child, its position) and what each has there.
Histories of types the binary has no definition of are listed too.

This binary knows the demo's workflows only (examples/intake). For your own
types, build the same command into a program of yours with sdk.ReplayMain
(see docs/replay.md); it takes the same flags.

Sources: the tasks of the database (--database-url or the embedded --db, in
--namespace), filtered by --type, --status and --limit; or --dir FOLDER of
files written by 'cairn task history ID -o json > ID.json'.

Exit codes: 0 every history replays, 1 some would not, 2 bad usage or the
histories could not be read.`

func newReplayCmd(g *globals) *cobra.Command {
	var dir, typ, statuses string
	var limit int
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Check recorded histories still replay on this binary's workflows",
		Long:  replayLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := sdk.NewReplayer()
			if err := intake.RegisterReplay(r, intake.Config{}); err != nil {
				return err
			}
			var res sdk.ReplayResult
			var err error
			if dir != "" {
				if typ != "" || statuses != "" {
					return errmark.Mark(errors.New("--type and --status filter a database's tasks, not --dir's files"), configError)
				}
				if res, err = r.ReplayDir(cmd.Context(), dir); err != nil {
					return errmark.Mark(err, configError)
				}
			} else {
				opts, perr := sdk.ParseReplayFilters(typ, statuses, limit)
				if perr != nil {
					return errmark.Mark(perr, configError)
				}
				c, closeDB, cerr := g.client(cmd.Context())
				if cerr != nil {
					return cerr
				}
				defer closeDB()
				if res, err = r.ReplayTasks(cmd.Context(), c, opts); err != nil {
					return err
				}
			}
			if err := sdk.WriteReplayReport(cmd.OutOrStdout(), res, g.output == "json"); err != nil {
				return err
			}
			if !res.OK() {
				return errors.Newf("%d of %d histories would not replay", len(res.Divergences), res.Replayed)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "replay the history files (*.json) in this folder instead of a database's tasks")
	cmd.Flags().StringVar(&typ, "type", "", "replay tasks of this type only")
	cmd.Flags().StringVar(&statuses, "status", "", "replay tasks in these statuses only, comma-separated")
	cmd.Flags().IntVar(&limit, "limit", 1000, "replay at most this many tasks per type, newest first")
	return cmd
}
