package main

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
)

func newTaskQueryCmd(g *globals) *cobra.Command {
	var args string
	cmd := &cobra.Command{
		Use:   "query ID NAME",
		Short: "Ask a task's workflow a query, answered from its state as of its latest event",
		Long: `Asks the task's workflow the query it registered as NAME (workflow.SetQuery)
and prints the answer as JSON. A worker that runs the task's type and version
answers by replaying the task's history, running no step, whether the task
runs, waits or has finished; nothing is written. --args is the query's
arguments as JSON (at most 64 KiB). A query no worker answers within 10s (or
whose type no worker registered) fails saying so.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, argv []string) error {
			id, err := parseTaskID(argv[0])
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if args != "" {
				if !json.Valid([]byte(args)) {
					return errmark.Mark(errors.Newf("--args %q is not JSON", args), configError)
				}
				raw = json.RawMessage(args)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			var answer json.RawMessage
			if err := c.Query(cmd.Context(), id, argv[1], raw, &answer); err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			if g.output == "json" {
				return printJSON(cmd, map[string]any{"id": id, "query": argv[1], "answer": answer})
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(answer))
			return nil
		},
	}
	cmd.Flags().StringVar(&args, "args", "", "the query's arguments, as JSON")
	return cmd
}
