package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newTaskRetryCmd(g *globals) *cobra.Command {
	return newTaskRequestCmd(g, "retry", "requeued", "Send a dead-lettered task back to its queue",
		`Sends a dead-lettered task back to its queue. Its history records
task_requeued with who asked (cli:<user>@<host>) and --reason; the task is
due at once, keeps its attempt count, and gets a fresh retry budget.`,
		(*sdk.Client).Retry)
}

func newTaskCancelCmd(g *globals) *cobra.Command {
	return newTaskRequestCmd(g, "cancel", "cancel requested", "Cancel a task",
		`Cancels a task. A pending or retry-waiting task with nothing to
compensate is cancelled at once and never runs. A running task stops at its
next checkpoint (an irreversible step in progress finishes first); its
completed steps that have compensators are undone in reverse order, and it
ends cancelled. The history records cancel_requested with who asked and
--reason. A finished task cannot be cancelled.`,
		(*sdk.Client).Cancel)
}

func newTaskCompensateCmd(g *globals) *cobra.Command {
	return newTaskRequestCmd(g, "compensate", "compensation requested", "Undo a completed task's steps",
		`Runs the compensators of a completed task's steps, in reverse order of
completion, each recorded in its history (step_compensated); the task then
ends cancelled. Only a completed task with compensable steps qualifies.`,
		(*sdk.Client).Compensate)
}

func newTaskEraseCmd(g *globals) *cobra.Command {
	return newTaskRequestCmd(g, "erase", "erased", "Erase a finished task's data (crypto-shredding)",
		`Destroys a finished task's data key: every payload of the task (input,
step outputs, output, signal payloads, blobs), encrypted at rest with it,
is unreadable for good, in this database and in any later copy of it. The
events stay: types, times, attempts, errors, who did what; the history ends
with task_erased recording who asked and --reason. It needs no keys. A task
not yet finished is refused (cancel it first), as is a task of a namespace
that was not encrypted (--keys) when it ran.`,
		(*sdk.Client).Erase)
}

// newTaskRequestCmd is a command that asks something of one task, with a
// reason recorded in its history.
func newTaskRequestCmd(g *globals, verb, done, short, long string, request func(*sdk.Client, context.Context, uuid.UUID, string) error) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := request(c, cmd.Context(), id, reason); err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			if g.output == "json" {
				return printJSON(cmd, map[string]any{"id": id, "result": done})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: %s\n", id, done)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the task's history)")
	return cmd
}

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Dead letters: tasks that failed permanently or used up their retries",
	}
	cmd.AddCommand(newDLQListCmd(g), newDLQRetryCmd(g))
	return cmd
}

// dlqFlags select dead letters.
type dlqFlags struct {
	typ, filter string
	limit       int
	include     []string // dlq list only
}

func (f *dlqFlags) register(cmd *cobra.Command, limitHelp string) {
	cmd.Flags().StringVar(&f.typ, "type", "", "only tasks of this type")
	cmd.Flags().StringVar(&f.filter, "filter", "", `CEL filter over task and error, e.g. 'error.status == 503 && task.type == "crm.sync"'`)
	cmd.Flags().IntVar(&f.limit, "limit", 50, limitHelp)
}

func (f *dlqFlags) opts() (sdk.DeadLetterOpts, error) {
	opts := sdk.DeadLetterOpts{Type: f.typ, Limit: f.limit}
	if f.limit == 0 || f.limit < -1 {
		return sdk.DeadLetterOpts{}, errmark.Mark(errors.Newf("--limit %d: use a positive number, or -1 for no limit", f.limit), configError)
	}
	var err error
	if opts.IncludeInput, opts.IncludeOutput, err = parseInclude(f.include); err != nil {
		return sdk.DeadLetterOpts{}, err
	}
	if f.filter != "" {
		filter, err := sdk.CompileTaskFilter(f.filter)
		if err != nil {
			return sdk.DeadLetterOpts{}, errmark.Mark(errors.Wrap(err, "--filter"), configError)
		}
		opts.Filter = filter
	}
	return opts, nil
}

func newDLQListCmd(g *globals) *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered tasks, newest first, with their last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.opts()
			if err != nil {
				return err
			}
			if opts.Limit > 0 {
				opts.Limit++ // one more says whether the limit cut the list short
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			tasks, err := c.DeadLetters(cmd.Context(), &opts)
			if err != nil && len(tasks) == 0 {
				return err
			}
			more := f.limit > 0 && len(tasks) > f.limit
			if more {
				tasks = tasks[:f.limit]
			}
			if perr := printDeadLetters(cmd, tasks, opts, g.output == "json"); perr != nil {
				return perr
			}
			if more {
				// On stderr, after the list, so -o json stays one JSON value.
				fmt.Fprintf(cmd.ErrOrStderr(), "stopped at --limit %d: more dead letters match (--limit -1 for all)\n", f.limit)
			}
			if g.output == "json" && !errors.Is(err, sdk.ErrFilterTooExpensive) {
				return nil // as before: filter errors are reported with the table only
			}
			return withHint(err)
		},
	}
	f.register(cmd, "at most this many tasks (-1: all)")
	cmd.Flags().StringSliceVar(&f.include, "include", nil, includeHelp)
	return cmd
}

// printDeadLetters prints dead letters as JSON (with the payloads opts
// includes) or as a table with their last error.
func printDeadLetters(cmd *cobra.Command, tasks []*sdk.TaskInfo, opts sdk.DeadLetterOpts, asJSON bool) error {
	if asJSON {
		out := make([]listedTask, len(tasks))
		for i, t := range tasks {
			out[i] = listed(t, opts.IncludeInput, opts.IncludeOutput)
		}
		return printJSON(cmd, out)
	}
	w := newTable(cmd)
	fmt.Fprintln(w, "ID\tTYPE\tATTEMPT\tDEAD SINCE\tLAST ERROR")
	for _, t := range tasks {
		last := "-"
		if t.LastError != nil {
			last = describeError(*t.LastError)
		}
		fmt.Fprintf(w, "%s\t%s@%d\t%d\t%s\t%s\n", t.ID, t.Type, t.TypeVersion, t.Attempt, formatTime(t.FinishedAt), last)
	}
	return w.Flush()
}

func newDLQRetryCmd(g *globals) *cobra.Command {
	var f dlqFlags
	var reason string
	var all bool
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Send matching dead letters back to their queues",
		Long: `Requeues every dead letter that matches --type and --filter (at most
--limit of them), as 'cairn task retry' does for one. Say --all to requeue
every dead letter of the namespace without a filter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.filter == "" && f.typ == "" && !all {
				return errmark.Mark(errors.New("give --filter or --type to choose dead letters, or --all for every one"), configError)
			}
			opts, err := f.opts()
			if err != nil {
				return err
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			report, err := c.RetryDeadLetters(cmd.Context(), reason, &opts)
			failed := make([]uuid.UUID, 0, len(report.Failed))
			for id := range report.Failed {
				failed = append(failed, id)
			}
			slices.SortFunc(failed, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
			if g.output == "json" {
				out := map[string]any{"requeued": report.Retried, "failed": map[string]string{}}
				for _, id := range failed {
					out["failed"].(map[string]string)[id.String()] = report.Failed[id].Error()
				}
				if perr := printJSON(cmd, out); perr != nil {
					return perr
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "requeued %d task(s)\n", len(report.Retried))
			if f.limit > 0 && len(report.Retried)+len(report.Failed) >= f.limit {
				fmt.Fprintf(cmd.OutOrStdout(), "stopped at --limit %d: more dead letters may match (run again, or --limit -1 for all)\n", f.limit)
			}
			for _, id := range failed {
				fmt.Fprintf(cmd.OutOrStdout(), "not requeued %s: %v\n", id, report.Failed[id])
			}
			return err
		},
	}
	f.register(cmd, "requeue at most this many tasks (-1: all)")
	cmd.Flags().StringVar(&reason, "reason", "", "why the tasks are retried (recorded in each history)")
	cmd.Flags().BoolVar(&all, "all", false, "allow requeueing without --filter or --type")
	return cmd
}
