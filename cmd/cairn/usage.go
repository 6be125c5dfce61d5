package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newUsageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "What tasks spent on AI models: per task with its children, and over time by tenant, model or type",
	}
	cmd.AddCommand(newUsageTaskCmd(g), newUsageByCmd(g))
	return cmd
}

func newUsageTaskCmd(g *globals) *cobra.Command {
	var children bool
	cmd := &cobra.Command{
		Use:   "task ID",
		Short: "What a task spent, by model; with --children, its batch: every descendant, and each child's total",
		Long: `Prints what a task's steps reported (activities.RecordUsage) on their
step_completed and attempt_failed events, from its history alone: tokens
in and out, cost, by model. With --children its descendants are rolled up
with it (a batch's cost), and each direct child is listed with its own
roll-up (a child that continued as new counts every run of its chain); the
total is the task's own usage plus its children's totals. At most 100,000
task runs are read.`,
		Example: `  cairn usage task 01935c6e-7c1a-7b5e-9a1f-3c2d4e5f6a7b --children
  cairn usage task 01935c6e-7c1a-7b5e-9a1f-3c2d4e5f6a7b -o json`,
		Args: cobra.ExactArgs(1),
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
			u, err := c.TaskUsage(cmd.Context(), id, &sdk.TaskUsageOpts{Children: children})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, u)
			}
			return printTaskUsage(cmd.OutOrStdout(), u)
		},
	}
	cmd.Flags().BoolVar(&children, "children", false, "roll the task's children up with it, recursively")
	return cmd
}

// usageCells is a total's table cells: input and output tokens, cost.
func usageCells(u cairntype.UsageTotal) string {
	return fmt.Sprintf("%d\t%d\t$%.4f", u.InputTokens, u.OutputTokens, u.CostUSD)
}

func printTaskUsage(out io.Writer, u *cairntype.TaskUsage) error {
	w := newTableTo(out)
	fmt.Fprintf(w, "task %s (%s, %s", u.TaskID, u.Type, u.Status)
	if u.FairnessKey != "" {
		fmt.Fprintf(w, ", fairness key %s", u.FairnessKey)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintln(w, "\tINPUT\tOUTPUT\tCOST")
	fmt.Fprintf(w, "own\t%s\n", usageCells(u.Own))
	if u.WithChildren {
		fmt.Fprintf(w, "with children (%d tasks)\t%s\n", u.Tasks, usageCells(u.Total))
	}
	for _, m := range u.ByModel {
		fmt.Fprintf(w, "  %s\t%s\n", m.Model, usageCells(m.UsageTotal))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if u.Missing > 0 {
		fmt.Fprintf(out, "%d descendants are gone (retention removed them): their usage is not counted\n", u.Missing)
	}
	if len(u.Children) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	w = newTableTo(out)
	fmt.Fprintln(w, "CHILD\tTASK\tTYPE\tSTATUS\tTASKS\tINPUT\tOUTPUT\tCOST")
	for _, c := range u.Children {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", c.Position, c.TaskID, dash(c.Type), dash(string(c.Status)), c.Tasks, usageCells(c.Total))
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newUsageByCmd(g *globals) *cobra.Command {
	var since, until string
	var step time.Duration
	cmd := &cobra.Command{
		Use:   "by tenant|model|type",
		Short: "The namespace's usage over time, by tenant (fairness key), model or type",
		Long: `Prints the usage the namespace's steps reported over a window, broken down
by tenant (the task's fairness key; "fairness_key" works too), model or
type, in buckets of --step aligned to the Unix epoch in UTC (a step of an
hour starts on the hour), the window widened to whole steps. Keys by cost,
highest first; at most 50, the rest summed as "(other)". At most 744
buckets over at most 31 days, steps of 1m or more. The table has a row a
key and bucket with usage; -o json prints every bucket.`,
		Example: `  cairn usage by tenant --since 24h --step 1h
  cairn usage by model --since 7d --step 24h -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			by, err := cairntype.ParseUsageBy(args[0])
			if err != nil {
				return errmark.Mark(errors.Newf("cairn usage by %q: use tenant, model or type", args[0]), configError)
			}
			now := time.Now()
			q := sdk.UsageQuery{By: by, Step: step}
			if q.Since, err = parseAuditTime("since", since, now); err != nil {
				return err
			}
			if until != "" {
				if q.Until, err = parseAuditTime("until", until, now); err != nil {
					return err
				}
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			s, err := c.UsageSeries(cmd.Context(), q)
			if err != nil {
				if errors.Is(err, sdk.ErrInvalid) {
					return errmark.Mark(err, configError)
				}
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, s)
			}
			return printUsageSeries(cmd.OutOrStdout(), s)
		},
	}
	cmd.Flags().StringVar(&since, "since", "24h", "the window starts this long ago (24h, 90m, 7d) or at this RFC 3339 time")
	cmd.Flags().StringVar(&until, "until", "", "the window ends this long ago or at this RFC 3339 time (default now)")
	cmd.Flags().DurationVar(&step, "step", time.Hour, "each bucket's length, 1m or more")
	return cmd
}

func printUsageSeries(out io.Writer, s *cairntype.UsageSeries) error {
	w := newTableTo(out)
	fmt.Fprintf(w, "%s\tBUCKET\tREPORTS\tINPUT\tOUTPUT\tCOST\n", strings.ToUpper(string(s.By)))
	for _, k := range s.Keys {
		key := k.Key
		if key == "" {
			key = "(none)"
		}
		for i, p := range k.Points {
			if p.Reports == 0 {
				continue
			}
			start := s.From.Add(time.Duration(i) * s.Step)
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", key, start.Format("2006-01-02 15:04"), p.Reports, usageCells(p))
		}
		fmt.Fprintf(w, "%s\ttotal\t%d\t%s\n", key, k.Total.Reports, usageCells(k.Total))
	}
	fmt.Fprintf(w, "all\t%s to %s\t%d\t%s\n", s.From.Format("2006-01-02 15:04"), s.Until.Format("2006-01-02 15:04 MST"), s.Total.Reports, usageCells(s.Total))
	return w.Flush()
}
