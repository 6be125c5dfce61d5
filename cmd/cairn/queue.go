package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Queues: their load, limits (bounded capacity, global concurrency), waits and diagnosis"}
	cmd.AddCommand(newQueueSetCmd(g), newQueueListCmd(g), newQueueWaitsCmd(g), newQueueDiagnoseCmd(g))
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
				return errmark.Mark(errors.New("--max-waiting and --concurrency must not be negative (0: no limit)"), configError)
			}
			c, closeDB, err := g.clientCreating(cmd.Context())
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

// queueListWindow bounds --window of `cairn queue list`, as GET
// /v1/queues bounds its window.
const queueListWindow = 24 * time.Hour

func newQueueListCmd(g *globals) *cobra.Command {
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every queue with tasks or limits: tasks waiting, due and running, limits, and the window's outcomes",
		Long: `Lists every queue of the namespace that has unfinished tasks, limits, or
tasks finished within --window (GET /v1/queues lists the same): how many
tasks wait (pending or retrying) and how many of those are due, how many
run, the queue's limits ("-": none), and the tasks completed and failed
(failed, dead-lettered or expired) within the window.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if window <= 0 || window > queueListWindow {
				return errmark.Mark(errors.Newf("--window %s: use more than 0s and at most %s", window, queueListWindow), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			queues, err := c.QueueStats(cmd.Context(), window)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, queues)
			}
			w := newTable(cmd)
			fmt.Fprintf(w, "QUEUE\tWAITING\tDUE\tRUNNING\tMAX WAITING\tCONCURRENCY\tCOMPLETED (%s)\tFAILED (%s)\n", window, window)
			for _, q := range queues {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\n", q.Queue, q.Waiting, q.Due, q.Running,
					limit(q.MaxWaiting), limit(q.Concurrency), q.Completed, q.Failed)
			}
			return w.Flush()
		},
	}
	cmd.Flags().DurationVar(&window, "window", 5*time.Minute, "how far back the completed and failed counts look (at most 24h)")
	return cmd
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func newQueueWaitsCmd(g *globals) *cobra.Command {
	return listCmd(g, "waits", "Due tasks waiting per queue and priority, and how long the oldest has waited",
		"QUEUE\tPRIORITY\tWAITING\tOLDEST WAITING", (*sdk.Client).QueueWaits,
		func(q cairntype.QueueWait) string {
			return fmt.Sprintf("%s\t%d\t%d\t%s", q.Queue, q.Priority, q.Waiting, time.Since(q.Oldest).Round(time.Millisecond))
		})
}

func newQueueDiagnoseCmd(g *globals) *cobra.Command {
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "diagnose QUEUE",
		Short: "Why is this queue growing? Compare the two halves of a recent window and rank the likely causes",
		Long: `Reads the queue's history over the window ending now and compares its first
half ("then") with its second ("now"): tasks created and finished, attempts
started, retried and failed, live workers, attempt and step durations. Adds
the queue's depth, limits and waiting tasks by type and fairness key, and
ranks the likely causes of growth (lost_consumers, poison_retries,
slower_attempts, inflow_spike, hot_key, concurrency_capped, rate_limited,
unserved_type), each with the numbers behind it. --window is between 2s and
24h.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if window < sdk.MinDiagnoseWindow || window > sdk.MaxDiagnoseWindow {
				return errmark.Mark(errors.Newf("--window %s: use %s to %s", window, sdk.MinDiagnoseWindow, sdk.MaxDiagnoseWindow), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			d, err := c.DiagnoseQueue(cmd.Context(), args[0], window)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, d)
			}
			return printDiagnosis(cmd.OutOrStdout(), d)
		},
	}
	cmd.Flags().DurationVar(&window, "window", 15*time.Minute, "how far back to look; its two halves are compared")
	return cmd
}

// printDiagnosis writes a diagnosis for people: the halves side by side,
// the queue now, then the causes with their evidence.
func printDiagnosis(out io.Writer, d *cairntype.QueueDiagnosis) error {
	half := (d.Window / 2).String()
	fmt.Fprintf(out, "queue %s (namespace %s), window %s ending %s\n\n", d.Queue, d.Namespace, d.Window, d.At.Format(time.RFC3339))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\tTHEN (first %s)\tNOW (last %s)\n", half, half)
	printHalves(w, d.Then, d.Now)
	printTypeDurations(w, d.Then, d.Now)
	printStepDurations(w, d.Then, d.Now)
	if err := w.Flush(); err != nil {
		return err
	}
	printQueueState(out, d)
	if err := printStranded(out, d); err != nil {
		return err
	}
	printCauses(out, d)
	return nil
}

// printStranded lists the tasks no worker will run: those a worker's
// deploy check found its code cannot replay (with the first divergence),
// and those of a type version no worker ran in the window, with how long
// they have waited.
func printStranded(out io.Writer, d *cairntype.QueueDiagnosis) error {
	var unserved []cairntype.WaitingType
	for _, w := range d.WaitingByType {
		if !w.Served && w.Due > 0 {
			unserved = append(unserved, w)
		}
	}
	if len(d.Stranded) == 0 && len(unserved) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nstranded: tasks no running worker will take")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TYPE\tTASKS\tWAITED\tWHY")
	for _, s := range d.Stranded {
		fmt.Fprintf(w, "%s@%d\t%d\t%s\tthe code of %s cannot replay them: %s %d recorded %s, called %s\n", s.Type, s.Version, s.Tasks,
			s.OldestWait, strings.Join(s.Workers, ", "), s.Kind, s.Position, s.Recorded, s.Called)
	}
	for _, u := range unserved {
		fmt.Fprintf(w, "%s@%d\t%d\t%s\tno worker runs this version (none started in the window)\n", u.Type, u.Version, u.Due, u.OldestWait)
	}
	return w.Flush()
}

func printHalves(w io.Writer, then, now cairntype.DiagnosisHalf) {
	row := func(label string, f func(h cairntype.DiagnosisHalf) string) {
		fmt.Fprintf(w, "%s\t%s\t%s\n", label, f(then), f(now))
	}
	row("inflow", func(h cairntype.DiagnosisHalf) string { return fmt.Sprint(h.Inflow) })
	row("outflow (completed)", func(h cairntype.DiagnosisHalf) string { return fmt.Sprintf("%d (%d)", h.Outflow, h.Completed) })
	row("attempts started", func(h cairntype.DiagnosisHalf) string { return fmt.Sprint(h.AttemptsStarted) })
	row("retries (share)", func(h cairntype.DiagnosisHalf) string { return fmt.Sprintf("%d (%.0f%%)", h.Retries, 100*h.RetryShare) })
	row("attempts failed", func(h cairntype.DiagnosisHalf) string { return fmt.Sprint(h.AttemptsFailed) })
	row("leases expired", func(h cairntype.DiagnosisHalf) string { return fmt.Sprint(h.LeasesExpired) })
	row("live workers", func(h cairntype.DiagnosisHalf) string { return fmt.Sprint(h.Workers) })
	row("attempt p50 / p95", func(h cairntype.DiagnosisHalf) string { return durations(h.Attempts) })
}

// durations formats a median and 95th percentile, or "-" without samples.
func durations(s cairntype.DurationStats) string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s (%d)", s.P50, s.P95, s.Count)
}

func printTypeDurations(w io.Writer, then, now cairntype.DiagnosisHalf) {
	for _, name := range typesOf(then, now) {
		var a, b cairntype.DurationStats
		for _, t := range then.Types {
			if t.Type == name {
				a = t.Attempts
			}
		}
		for _, t := range now.Types {
			if t.Type == name {
				b = t.Attempts
			}
		}
		fmt.Fprintf(w, "  %s attempts\t%s\t%s\n", name, durations(a), durations(b))
	}
}

func printStepDurations(w io.Writer, then, now cairntype.DiagnosisHalf) {
	type key struct{ typ, step string }
	var keys []key
	stats := map[key][2]cairntype.DurationStats{}
	for i, h := range []cairntype.DiagnosisHalf{then, now} {
		for _, s := range h.Steps {
			k := key{s.Type, s.Step}
			v, seen := stats[k]
			if !seen {
				keys = append(keys, k)
			}
			v[i] = s.Duration
			stats[k] = v
		}
	}
	for _, k := range keys {
		fmt.Fprintf(w, "  %s step %s\t%s\t%s\n", k.typ, k.step, durations(stats[k][0]), durations(stats[k][1]))
	}
}

// typesOf lists the task types of both halves, each once, in order of
// appearance.
func typesOf(halves ...cairntype.DiagnosisHalf) []string {
	var names []string
	for _, h := range halves {
		for _, t := range h.Types {
			if !slices.Contains(names, t.Type) {
				names = append(names, t.Type)
			}
		}
	}
	return names
}

func printQueueState(out io.Writer, d *cairntype.QueueDiagnosis) {
	dp := d.Depth
	fmt.Fprintf(out, "\nnow: %d pending, %d retrying, %d running; %d due, the oldest waiting %s", dp.Pending, dp.Retrying, dp.Running, dp.Due, dp.OldestWait)
	if dp.ExpiredLeases > 0 {
		fmt.Fprintf(out, "; %d running with expired leases", dp.ExpiredLeases)
	}
	fmt.Fprintf(out, "\nlimits: concurrency %s, max waiting %s", limit(d.Limits.Concurrency), limit(d.Limits.MaxWaiting))
	for _, rl := range d.Limits.RateLimits {
		fmt.Fprintf(out, ", %s at most %d per %s", rl.Type, rl.MaxStarts, rl.Per)
	}
	fmt.Fprintln(out)
	if len(d.WaitingByType) > 0 {
		var parts []string
		for _, t := range d.WaitingByType {
			parts = append(parts, fmt.Sprintf("%s v%d %d (%.0f%%)", t.Type, t.Version, t.Waiting, 100*t.Share))
		}
		fmt.Fprintf(out, "waiting by type: %s\n", strings.Join(parts, ", "))
	}
	if len(d.WaitingByKey) > 0 {
		var parts []string
		for _, k := range d.WaitingByKey {
			parts = append(parts, fmt.Sprintf("%s %d (%.0f%%)", k.Key, k.Waiting, 100*k.Share))
		}
		fmt.Fprintf(out, "waiting by fairness key (%d keys): %s\n", d.FairnessKeys, strings.Join(parts, ", "))
	}
}

func printCauses(out io.Writer, d *cairntype.QueueDiagnosis) {
	if len(d.Causes) == 0 {
		fmt.Fprintf(out, "\nno cause found: %s\n", d.Summary)
		return
	}
	fmt.Fprintln(out, "\ncauses, most likely first:")
	for i, c := range d.Causes {
		fmt.Fprintf(out, "%d. %s (score %.2f): %s\n", i+1, c.Code, c.Score, c.Summary)
		for _, e := range c.Evidence {
			fmt.Fprintf(out, "   - %s\n", e)
		}
	}
}
