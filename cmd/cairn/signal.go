package main

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newTaskSignalCmd(g *globals) *cobra.Command {
	var payload, dedupID string
	cmd := &cobra.Command{
		Use:   "signal ID NAME",
		Short: "Send a task a signal, for its workflow's receive of NAME",
		Long: `Sends a task a signal called NAME (signal_received in its history): the
workflow's next receive of NAME returns it, and a task waiting for it is due
at once. --payload is the signal's value as JSON; --dedup-id makes the send
idempotent (a signal with that id already in the history is not written
again). A finished task cannot be signalled.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return errmark.Mark(errors.Newf("--payload %q is not JSON", payload), configError)
				}
				raw = json.RawMessage(payload)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			res, err := c.Signal(cmd.Context(), id, args[1], raw, &sdk.SignalOpts{DedupID: dedupID})
			if err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			result := "signal " + args[1] + " sent"
			if res.Duplicate {
				result = "signal " + args[1] + " already received (dedup id " + dedupID + "): nothing sent"
			}
			if g.output == "json" {
				return printJSON(cmd, map[string]any{"id": id, "signal": args[1], "duplicate": res.Duplicate})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s: %s\n", id, result)
			return nil
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's value, as JSON")
	cmd.Flags().StringVar(&dedupID, "dedup-id", "", "send once: a signal with this id already in the history is not sent again")
	return cmd
}
