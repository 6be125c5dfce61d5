package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// maxUpdateWait bounds --wait of cairn task update.
const maxUpdateWait = 10 * time.Minute

func newTaskUpdateCmd(g *globals) *cobra.Command {
	var argsJSON, updateID string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "update ID NAME",
		Short: "Send a running task an update and print its handler's result",
		Long: `Sends a running task the update NAME (workflow.SetUpdate): its validator
runs on the workflow's state as of the task's last event, and an update it
rejects is refused with the validator's text, nothing written. Accepted, the
update is recorded, the task (woken if it waits) applies it, and its
handler's result is printed. --args is the update's value as JSON; --id
makes it idempotent (an update with that id in the history already is not
applied again: its result is printed). --wait bounds the wait for the
result (default 30s, at most 10m): past it the update stays recorded and is
applied; run the command again with its --id to read the result.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			if wait <= 0 || wait > maxUpdateWait {
				return errmark.Mark(errors.Newf("--wait %s is outside 0s..%s", wait, maxUpdateWait), configError)
			}
			var raw json.RawMessage
			if argsJSON != "" {
				if !json.Valid([]byte(argsJSON)) {
					return errmark.Mark(errors.Newf("--args %q is not JSON", argsJSON), configError)
				}
				raw = json.RawMessage(argsJSON)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			res, err := c.Update(ctx, id, args[1], raw, &sdk.UpdateOpts{UpdateID: updateID})
			if err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			if g.output == "json" {
				return printJSON(cmd, map[string]any{"id": id, "update": args[1], "update_id": res.UpdateID, "output": res.Output, "duplicate": res.Duplicate})
			}
			note := ""
			if res.Duplicate {
				note = " (applied before)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: update %s (%s) applied%s: %s\n", id, args[1], res.UpdateID, note, res.Output)
			return nil
		},
	}
	cmd.Flags().StringVar(&argsJSON, "args", "", "the update's value, as JSON")
	cmd.Flags().StringVar(&updateID, "id", "", "the update's id: an update with this id in the history already is not applied again")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the result")
	return cmd
}
