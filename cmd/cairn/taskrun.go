package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// The commands a person tries a workflow with from a shell: start one,
// wait for it, watch its history grow.

// maxWatchPoll bounds --poll: a watch reads the history at least this
// often, so a watch left running does not go silent.
const maxWatchPoll = time.Minute

func newTaskStartCmd(g *globals) *cobra.Command {
	var (
		input, key, queue string
		version           int
		wait              bool
		timeout           time.Duration
		budgetUSD         float64
		budgetTokens      int64
	)
	cmd := &cobra.Command{
		Use:   "start TYPE",
		Short: "Start a task of a registered workflow type, and optionally wait for it",
		Long: `Starts a task of the workflow type TYPE, as POST /v1/tasks does: --input
is its input as JSON, --version the type's version (0: the highest a worker
registered), --key an idempotency key (a second start with it returns the
first task and creates nothing), --queue a queue other than the type's,
--budget-usd and --budget-tokens the task's own budget (over its life and
its descendants'; it fails at the limit, see docs/budgets.md).
It prints the task's id; with --wait it waits for the task to finish (at
most --timeout) and prints it as "task show" does, exiting 1 when it did
not complete.

A type can be started once a worker that registers it has started (it
records its types in the store): "cairn demo worker" registers
document.process, for instance.`,
		Example: `  cairn task start document.process --input '{"id":"doc-1","pages":2}' --wait
  cairn task start report.weekly --key week-49 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !json.Valid([]byte(input)) {
				return errmark.Mark(errors.Newf("--input %q is not valid JSON", input), configError)
			}
			if version < 0 || timeout <= 0 {
				return errmark.Mark(errors.New("--version must not be negative and --timeout must be positive"), configError)
			}
			c, closeDB, err := g.clientCreating(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			ref, err := c.RegisteredType(cmd.Context(), args[0], version)
			if err != nil {
				return err
			}
			opts := &sdk.StartOpts{IdempotencyKey: key, Queue: queue}
			if cmd.Flags().Changed("budget-usd") || cmd.Flags().Changed("budget-tokens") {
				opts.Budget = &sdk.Budget{USD: budgetUSD, Tokens: budgetTokens}
			}
			started, err := c.StartDynamic(cmd.Context(), ref, json.RawMessage(input), opts)
			if err != nil {
				return err
			}
			if !wait {
				if g.output == "json" {
					return printJSON(cmd, map[string]any{"id": started.ID, "existing": started.Existing})
				}
				if started.Existing {
					fmt.Fprintf(cmd.ErrOrStderr(), "idempotency key %q was used: this is the task it started\n", key)
				}
				fmt.Fprintln(cmd.OutOrStdout(), started.ID)
				return nil
			}
			return waitAndPrint(cmd, g, c, started.ID, timeout)
		},
	}
	cmd.Flags().StringVar(&input, "input", "null", "the task's input, as JSON")
	cmd.Flags().IntVar(&version, "version", 0, "the workflow type's version (0: the highest registered)")
	cmd.Flags().StringVar(&key, "key", "", "an idempotency key: a second start with it returns the first task")
	cmd.Flags().StringVar(&queue, "queue", "", "a queue other than the type's")
	cmd.Flags().Float64Var(&budgetUSD, "budget-usd", 0, "the task's budget in US dollars (with --budget-tokens: both limit)")
	cmd.Flags().Int64Var(&budgetTokens, "budget-tokens", 0, "the task's budget in tokens")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the task to finish and print it; exit 1 unless it completed")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, how long to wait")
	return cmd
}

func newTaskWaitCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a task to finish and print it; exit 1 unless it completed",
		Long: `Waits until the task finishes (completed, failed, cancelled, dead-lettered
or expired), at most --timeout, and prints it as "task show" does. It exits
0 when the task completed and 1 otherwise, or when --timeout passed first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return errmark.Mark(errors.New("--timeout must be positive"), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			return waitAndPrint(cmd, g, c, id, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait")
	return cmd
}

// waitAndPrint waits up to timeout for task id to finish and prints it; an
// error (exit 1) when it did not complete, or is still running.
func waitAndPrint(cmd *cobra.Command, g *globals, c *sdk.Client, id uuid.UUID, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	info, err := waitFinished(ctx, c, id)
	if errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
		if info, err = c.Get(cmd.Context(), id); err != nil {
			return notFoundAs(err, id, g.namespace)
		}
		if err := printTask(cmd, g, info, nil); err != nil {
			return err
		}
		return errors.Newf("task %s is still %s after %s", id, info.Status, timeout)
	}
	if err != nil {
		return notFoundAs(err, id, g.namespace)
	}
	return endedAs(printTask(cmd, g, info, nil), info)
}

// waitPoll is how long one Client.Wait of waitFinished lasts. The embedded
// store announces a finish only to the process that wrote it, so a CLI
// waiting on a task that `cairn dev` or a worker in another process runs
// would never hear it: each wait ends after waitPoll, and the task is read
// again.
const waitPoll = time.Second

// waitFinished is Client.Wait, reading the task again every waitPoll.
func waitFinished(ctx context.Context, c *sdk.Client, id uuid.UUID) (*sdk.TaskInfo, error) {
	for {
		short, cancel := context.WithTimeout(ctx, waitPoll)
		info, err := c.Wait(short, id)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			if err != nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			return info, err
		}
	}
}

// endedAs is err, or, when nil, an error unless the task completed.
func endedAs(err error, info *sdk.TaskInfo) error {
	if err != nil || info.Status == history.StatusCompleted {
		return err
	}
	return errors.Newf("task %s ended %s", info.ID, info.Status)
}

func newTaskWatchCmd(g *globals) *cobra.Command {
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Print a task's events and stream chunks as they come, until it finishes",
		Long: `Prints the task's history and what its steps streamed (activities.Stream,
Progress), then each event as it is appended and each chunk as it is
written, until the task finishes (then it exits 0 if the task completed, 1
otherwise) or you stop it. A "rewind" line says a failed attempt's chunks
are void: the step runs again. Chunks arrive as they are written (the
database announces them); new events are read every --poll (at most 1m).
-o json prints one JSON object per line: events as "task history -o json"
prints its array, stream entries as {"kind": "chunk"|"rewind"|"end", ...}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			if poll < 10*time.Millisecond || poll > maxWatchPoll {
				return errmark.Mark(errors.Newf("--poll %s: want at least 10ms and at most %s", poll, maxWatchPoll), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			return watch(cmd, g, c, id, poll)
		},
	}
	cmd.Flags().DurationVar(&poll, "poll", 250*time.Millisecond, "how often to read new events (at least 10ms)")
	return cmd
}

// watch prints task id's events from the first and the chunks of its
// streams, then each as it is appended or written, until the task has
// finished and everything is printed.
func watch(cmd *cobra.Command, g *globals, c *sdk.Client, id uuid.UUID, poll time.Duration) error {
	ctx := cmd.Context()
	printer := newEventPrinter(cmd, g.output == "json")
	for it, err := range c.Stream(ctx, id, 0, &sdk.StreamOpts{Events: true, Poll: poll}) {
		if err != nil {
			return notFoundAs(err, id, g.namespace)
		}
		switch it.Kind {
		case sdk.StreamEvent:
			err = printer.print(*it.Event)
		case sdk.StreamChunk, sdk.StreamRewind, sdk.StreamEnd:
			err = printer.printEntry(it)
		}
		if err != nil {
			return err
		}
	}
	info, err := c.Get(ctx, id)
	if err != nil {
		return notFoundAs(err, id, g.namespace)
	}
	return endedAs(nil, info)
}

// eventPrinter prints events one at a time, as lines of `task history`'s
// table (fixed widths, since the rows are not known ahead) or as JSON
// lines.
type eventPrinter struct {
	cmd    *cobra.Command
	asJSON bool
	header bool
}

func newEventPrinter(cmd *cobra.Command, asJSON bool) *eventPrinter {
	return &eventPrinter{cmd: cmd, asJSON: asJSON}
}

// streamLine is a stream entry as `task watch -o json` prints it.
type streamLine struct {
	Kind     sdk.StreamKind  `json:"kind"`
	Seq      int64           `json:"seq"`
	Stream   string          `json:"stream"`
	Attempt  int             `json:"attempt"`
	Position int             `json:"position"`
	Data     json.RawMessage `json:"data,omitempty"`
	Time     time.Time       `json:"time"`
}

// printEntry prints a chunk, rewind or end of the task's streams: a line
// of the table whose EVENT is the kind and the stream, whose DETAILS is
// the chunk (its text, quoted) or what the entry means.
func (p *eventPrinter) printEntry(it sdk.StreamItem) error {
	w := p.cmd.OutOrStdout()
	if p.asJSON {
		line, err := json.Marshal(streamLine{Kind: it.Kind, Seq: it.Seq, Stream: it.Stream, Attempt: it.Attempt, Position: it.Position, Data: it.Data, Time: it.Time})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	p.printHeader()
	where := fmt.Sprintf("step %d", it.Position)
	if it.Position < 0 {
		where = "the workflow"
	}
	var details string
	switch it.Kind {
	case sdk.StreamRewind:
		details = fmt.Sprintf("discard the chunks attempt %d of %s wrote: it failed, the step runs again", it.Attempt, where)
	case sdk.StreamEnd:
		details = fmt.Sprintf("%s completed: its chunks stand", where)
	default:
		details = string(it.Data)
		if text := it.Text(); text != "" || string(it.Data) == `""` {
			details = strconv.Quote(text)
		}
	}
	_, err := fmt.Fprintf(w, "%-4s  %-15s  %-7d  %-20s  %s\n", "", it.Time.Format("15:04:05.000000"), it.Attempt, string(it.Kind)+" "+it.Stream, details)
	return err
}

func (p *eventPrinter) printHeader() {
	if !p.header {
		fmt.Fprintf(p.cmd.OutOrStdout(), "%-4s  %-15s  %-7s  %-20s  %s\n", "SEQ", "AT", "ATTEMPT", "EVENT", "DETAILS")
		p.header = true
	}
}

func (p *eventPrinter) print(e history.Event) error {
	w := p.cmd.OutOrStdout()
	if p.asJSON {
		line, err := json.Marshal(e) // history.Event's JSON form, as `task history -o json`
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	p.printHeader()
	attempt := ""
	if e.Attempt > 0 {
		attempt = fmt.Sprint(e.Attempt)
	}
	_, err := fmt.Fprintf(w, "%-4d  %-15s  %-7s  %-20s  %s\n", e.Seq, e.At.Format("15:04:05.000000"), attempt, e.Type(), eventDetails(e.Data))
	return err
}
