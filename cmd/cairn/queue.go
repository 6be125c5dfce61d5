package main

import (
	"fmt"
	"time"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"
)

func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Queue limits: bounded capacity and global concurrency"}
	cmd.AddCommand(newQueueSetCmd(g), newQueueListCmd(g), newQueueWaitsCmd(g))
	return cmd
}

func newQueueSetCmd(g *globals) *cobra.Command {
	var s sdk.QueueSettings
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a queue's limits (0: no limit)",
		Long: `Sets a queue's limits in the namespace. --max-waiting bounds the tasks
waiting in it: a start beyond it fails with "queue full" (HTTP 429 in the API)
and writes nothing. --concurrency bounds its tasks running at once across
every worker; claims enforce it. 0 removes a limit.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if s.MaxWaiting < 0 || s.Concurrency < 0 {
				return errors.Mark(errors.New("--max-waiting and --concurrency must not be negative (0: no limit)"), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := c.SetQueue(cmd.Context(), args[0], s); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s: max waiting %s, concurrency %s\n", args[0], limit(s.MaxWaiting), limit(s.Concurrency))
			return nil
		},
	}
	cmd.Flags().IntVar(&s.MaxWaiting, "max-waiting", 0, "most tasks waiting in the queue (0: unbounded)")
	cmd.Flags().IntVar(&s.Concurrency, "concurrency", 0, "most tasks of the queue running at once, across all workers (0: unlimited)")
	return cmd
}

func newQueueListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the queues with limits, and how many tasks wait and run in each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			queues, err := c.Queues(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, queues)
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "QUEUE\tWAITING\tMAX WAITING\tRUNNING\tCONCURRENCY")
			for _, q := range queues {
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\n", q.Name, q.Waiting, limit(q.MaxWaiting), q.Running, limit(q.Concurrency))
			}
			return w.Flush()
		},
	}
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func newQueueWaitsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "waits",
		Short: "Due tasks waiting per queue and priority, and how long the oldest has waited",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			waits, err := c.QueueWaits(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, waits)
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "QUEUE\tPRIORITY\tWAITING\tOLDEST WAITING")
			for _, q := range waits {
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", q.Queue, q.Priority, q.Waiting, time.Since(q.Oldest).Round(time.Millisecond))
			}
			return w.Flush()
		},
	}
}
