package main

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// forkFlags are what `task fork` and `task reset` take.
type forkFlags struct {
	at                 int
	output, input, key string
	compensate         bool // reset only
	reason             string
}

func (f *forkFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.at, "at", -1, "the step position to fork at, as `task history` shows it (0-based; required)")
	cmd.Flags().StringVar(&f.output, "step-output", "", "replace the output of the step at --at with this JSON")
	cmd.Flags().StringVar(&f.input, "input", "", "the new task's input, as JSON (default: the original's)")
	cmd.Flags().StringVar(&f.key, "idempotency-key", "", "make the fork idempotent: a second with the key returns the first")
}

func (f *forkFlags) opts() (sdk.ForkOpts, error) {
	if f.at < 0 {
		return sdk.ForkOpts{}, errmark.Mark(errors.New("--at is required: the step position to fork at (0 or more)"), configError)
	}
	opts := sdk.ForkOpts{At: f.at, IdempotencyKey: f.key}
	for _, v := range []struct {
		flag, value string
		into        *json.RawMessage
	}{{"--step-output", f.output, &opts.Output}, {"--input", f.input, &opts.Input}} {
		if v.value == "" {
			continue
		}
		if !json.Valid([]byte(v.value)) {
			return sdk.ForkOpts{}, errmark.Mark(errors.Newf("%s is not valid JSON (a string needs its quotes: '\"text\"')", v.flag), configError)
		}
		*v.into = json.RawMessage(v.value)
	}
	return opts, nil
}

func newTaskForkCmd(g *globals) *cobra.Command {
	var f forkFlags
	cmd := &cobra.Command{
		Use:   "fork ID --at POSITION",
		Short: "Re-run a task from a step, as a new task",
		Long: `Starts a new task of the same type, queue and namespace whose history holds
copies of the original's steps at positions 0 to --at (as 'task history'
shows them; a sleep counts as a step): those never run again, the rest run
on the type's workers. --step-output replaces the output of the step at --at,
so the steps after it see the corrected value; --input gives the new task
another input. The original is left as it is, and records task_forked
naming the fork. Prints the new task's id, alone on its line, whatever
the global -o/--output format.

Refused: a position beyond the steps on record or not completed in order,
an erased task, a task that started children, received signals or waited
for one before the step at --at completed (not supported).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFork(cmd, g, args[0], &f, false)
		},
	}
	f.register(cmd)
	return cmd
}

func newTaskResetCmd(g *globals) *cobra.Command {
	var f forkFlags
	cmd := &cobra.Command{
		Use:   "reset ID --at POSITION",
		Short: "Fork a task from a step and cancel the original",
		Long: `Forks the task as 'task fork' does, then ends the original: one not
finished is cancelled (its compensable steps undone, as any cancel does);
a completed one is compensated with --compensate, else left as it is; the
request on the original is written with the fork. Prints the new task's
id; if the fork was written but ending the original failed (a run that
continued as new, cancelled after), prints the id and then fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFork(cmd, g, args[0], &f, true)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.compensate, "compensate", false, "undo a completed original's compensable steps (it then ends cancelled)")
	cmd.Flags().StringVar(&f.reason, "reason", "", "why (recorded with the cancel or compensation; default: reset: forked as <id>)")
	return cmd
}

func runFork(cmd *cobra.Command, g *globals, arg string, f *forkFlags, reset bool) error {
	id, err := parseTaskID(arg)
	if err != nil {
		return err
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
	var forkID uuid.UUID
	if reset {
		forkID, err = c.Reset(cmd.Context(), id, sdk.ResetOpts{ForkOpts: opts, Compensate: f.compensate, Reason: f.reason})
	} else {
		forkID, err = c.Fork(cmd.Context(), id, opts)
	}
	return reportFork(cmd, id, forkID, err, g.namespace)
}

// reportFork prints the fork's id, alone on its line whatever the format,
// so a script can take it; and fails with err when set. A reset that
// wrote the fork but failed to end the original returns both: the id is
// printed, then the error, since a retry without a key would fork again.
func reportFork(cmd *cobra.Command, id, forkID uuid.UUID, err error, namespace string) error {
	if err != nil && forkID == uuid.Nil {
		return notFoundAs(err, id, namespace)
	}
	fmt.Fprintln(cmd.OutOrStdout(), forkID)
	if err != nil {
		return errors.Wrapf(err, "the fork %s was written, but ending the original failed (retry with the fork's --idempotency-key, or cancel the original)", forkID)
	}
	return nil
}
