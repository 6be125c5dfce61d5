package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
)

var statuses = []history.Status{
	history.StatusPending, history.StatusRunning, history.StatusRetrying, history.StatusCompleted,
	history.StatusFailed, history.StatusCancelled, history.StatusDeadLettered, history.StatusExpired,
	history.StatusContinued,
}

func newTaskCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Start tasks, wait for and watch them, ask about their state and history"}
	cmd.AddCommand(newTaskStartCmd(g), newTaskWaitCmd(g), newTaskWatchCmd(g),
		newTaskShowCmd(g), newTaskHistoryCmd(g), newTaskListCmd(g), newTaskRetryCmd(g),
		newTaskCancelCmd(g), newTaskCompensateCmd(g), newTaskEraseCmd(g), newTaskSignalCmd(g), newTaskUpdateCmd(g),
		newTaskForkCmd(g), newTaskResetCmd(g), newTaskQueryCmd(g))
	return cmd
}

func parseTaskID(arg string) (uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return uuid.UUID{}, errmark.Mark(errors.Newf("task id %q is not a UUID", arg), configError)
	}
	return id, nil
}

func newTaskShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a task: status, attempt, output, last error, timestamps",
		Long: `Show a task: status, attempt, output, last error, timestamps.

A run of a workflow that continued as new names the run it continues
("continued from") and, once it ended continued, the run it continued as
("continued as"); "cairn task wait" on any run follows the chain to its
last.`,
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
			info, err := c.Get(cmd.Context(), id)
			if err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			forks, err := c.Forks(cmd.Context(), id)
			if err != nil {
				return err
			}
			return printTask(cmd, g, info, forks)
		},
	}
}

// printTask prints a task as `task show` does: a table, or one JSON
// object with -o json.
func printTask(cmd *cobra.Command, g *globals, info *sdk.TaskInfo, forks []history.Fork) error {
	if g.output == "json" {
		if len(forks) > 0 {
			return printJSON(cmd, struct {
				*sdk.TaskInfo
				Forks []history.Fork `json:"forks"`
			}{info, forks})
		}
		return printJSON(cmd, info)
	}
	w := newTable(cmd)
	row := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
	row("id", info.ID.String())
	row("type", fmt.Sprintf("%s@%d", info.Type, info.TypeVersion))
	row("queue", info.Queue)
	row("status", statusText(info, true))
	row("attempt", fmt.Sprintf("%d of %d", info.Attempt, info.MaxAttempts))
	if info.IdempotencyKey != "" {
		row("idempotency key", info.IdempotencyKey)
	}
	if info.ContinuedFrom != nil {
		row("continued from", info.ContinuedFrom.String())
	}
	if info.ContinuedAs != nil {
		row("continued as", info.ContinuedAs.String())
	}
	row("created", formatTime(&info.CreatedAt))
	row("started", formatTime(info.StartedAt))
	row("finished", formatTime(info.FinishedAt))
	if !info.Status.Terminal() {
		row("run at", formatTime(&info.RunAt))
	}
	if info.LeaseOwner != "" {
		row("lease owner", info.LeaseOwner)
	}
	if len(info.Output) > 0 {
		row("output", string(info.Output))
	}
	if e := info.LastError; e != nil {
		row("last error", describeError(*e))
	}
	if f := info.ForkedFrom; f != nil {
		row("forked from", fmt.Sprintf("task %s at step %d", f.TaskID, f.Position))
	}
	for _, f := range forks {
		row("fork", fmt.Sprintf("task %s at step %d", f.TaskID, f.Position))
	}
	return w.Flush()
}

func newTaskHistoryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history ID",
		Short: "Show every event of a task, in order",
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
			if g.output == "json" {
				// One code path with the replayer's files (sdk.Replayer.ReplayFile).
				if err := c.ExportHistory(cmd.Context(), id, cmd.OutOrStdout()); err != nil {
					return notFoundAs(err, id, g.namespace)
				}
				return nil
			}
			events, err := c.RawHistory(cmd.Context(), id)
			if err != nil {
				return notFoundAs(err, id, g.namespace)
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "SEQ\tAT\tATTEMPT\tEVENT\tDETAILS")
			for _, e := range events {
				attempt := ""
				if e.Attempt > 0 {
					attempt = fmt.Sprint(e.Attempt)
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Format("15:04:05.000000"), attempt, e.Type(), eventDetails(e.Data))
			}
			return w.Flush()
		},
	}
}

func eventDetails(p history.Payload) string {
	switch v := p.(type) {
	case history.TaskScheduledData:
		s := fmt.Sprintf("%s@%d on queue %s, max %d attempts", v.TaskType, v.TypeVersion, v.Queue, v.MaxAttempts)
		if f := v.ForkedFrom; f != nil {
			s += fmt.Sprintf(", forked from task %s at step %d", f.TaskID, f.Position)
		}
		return s
	case history.AttemptStartedData:
		return fmt.Sprintf("worker %s, lease epoch %d", v.WorkerID, v.LeaseEpoch)
	case history.StepCompletedData:
		s := fmt.Sprintf("step %d %s", v.Position, v.Name)
		if v.CopiedFromSeq > 0 {
			s += fmt.Sprintf(" (copied from event %d of the original)", v.CopiedFromSeq)
		}
		if v.DurationMillis > 0 {
			s += fmt.Sprintf(" in %s", time.Duration(v.DurationMillis)*time.Millisecond)
		}
		return s + describeUsage(v.Usage)
	case history.AttemptFailedData:
		s := describeError(v.Error)
		if v.NextRunAt != nil {
			s += ", retry at " + v.NextRunAt.Format("15:04:05.000")
		}
		return s + describeUsage(v.Usage)
	case history.TimerStartedData:
		return fmt.Sprintf("step %d sleeps until %s", v.Position, formatTime(&v.FireAt))
	case history.TimerFiredData:
		return fmt.Sprintf("step %d %s done", v.Position, history.SleepStepName)
	case history.SignalReceivedData:
		return describeSignal(v)
	case history.WaitStartedData:
		if v.Select != nil {
			return describeSelectWait(v)
		}
		return fmt.Sprintf("receive %d waits for %s until %s", v.Position, v.Name, formatTime(&v.Deadline))
	case history.SelectMatchedData:
		return describeSelectMatched(v)
	case history.WaitTimedOutData:
		return fmt.Sprintf("receive %d of %s timed out", v.Position, v.Name)
	case history.PatchRecordedData:
		return fmt.Sprintf("patch %s: new branch from step %d", v.PatchID, v.Position)
	case history.StreamClosedData:
		where := fmt.Sprintf("step %d", v.Position)
		if v.Position < 0 {
			where = "the workflow"
		}
		return fmt.Sprintf("stream %s of %s %s: %d chunks, %d bytes", v.Name, where, v.Outcome, v.Chunks, v.Bytes)
	case history.ModelLimitWaitedData:
		return fmt.Sprintf("step %d %s waited %dms under the rate limit of %s (%d tokens, %d ahead)", v.Position, v.Step, v.WaitedMS,
			v.Model, v.Tokens, v.Ahead)
	case history.UpdateAcceptedData:
		s := fmt.Sprintf("update %s %s", v.UpdateID, v.Name)
		if v.RequestedBy != "" {
			s += " from " + v.RequestedBy
		}
		if len(v.Args) > 0 {
			s += ": " + truncate(string(v.Args), 60)
		}
		return s
	case history.UpdateCompletedData:
		s := fmt.Sprintf("update %s applied at step %d", v.UpdateID, v.At.Step)
		if v.Error != nil {
			return s + ", failed: " + describeError(*v.Error)
		}
		return s + ": " + truncate(string(v.Output), 60)
	case history.ChildStartedData:
		s := fmt.Sprintf("child %d %s@%d: task %s", v.Position, v.TaskType, v.TypeVersion, v.ChildID)
		if v.OnParentClose == history.ParentCloseAbandon {
			s += " (abandoned if the parent ends)"
		}
		return s
	case history.ChildWaitStartedData:
		if len(v.Positions) == 1 {
			return fmt.Sprintf("awaits child %d", v.Positions[0])
		}
		return fmt.Sprintf("awaits %d of %d children (%d to %d)", max(v.Count, 1), len(v.Positions), v.Positions[0], v.Positions[len(v.Positions)-1])
	case history.ChildFinishedData:
		s := fmt.Sprintf("child %d %s: task %s", v.Position, v.Status, v.ChildID)
		if v.Error != nil {
			s += ": " + describeError(*v.Error)
		}
		return s
	case history.RemoteStepDispatchedData:
		return fmt.Sprintf("step %d %s to queue %s, attempt %d: %s", v.Position, v.Name, v.Queue, v.Attempt, truncate(string(v.Input), 60))
	case history.RemoteStepCompletedData:
		return fmt.Sprintf("step %d %s done by %s, attempt %d: %s", v.Position, v.Name, v.Worker, v.Attempt, truncate(string(v.Output), 60))
	case history.RemoteStepFailedData:
		return fmt.Sprintf("step %d %s failed at %s, attempt %d: %s", v.Position, v.Name, v.Worker, v.Attempt, describeError(v.Error))
	case history.RemoteWaitStartedData:
		if len(v.Positions) == 1 {
			return fmt.Sprintf("awaits remote step %d", v.Positions[0])
		}
		return fmt.Sprintf("awaits %d of %d remote steps (%d to %d)", max(v.Count, 1), len(v.Positions), v.Positions[0], v.Positions[len(v.Positions)-1])
	case history.LeaseExpiredData:
		return fmt.Sprintf("worker %s, lease epoch %d", v.WorkerID, v.LeaseEpoch)
	case history.TaskReleasedData:
		return fmt.Sprintf("worker %s: %s", v.WorkerID, v.Reason)
	case history.TaskCompletedData:
		return truncate(string(v.Output), 80)
	case history.TaskFailedData:
		return describeError(v.Error)
	case history.TaskDeadLetteredData:
		return v.Reason + ": " + describeError(v.Error)
	case history.TaskRequeuedData:
		return byWhom(v.By, v.Reason)
	case history.TaskExpiredData:
		return v.Reason
	case history.CancelRequestedData:
		return byWhom(v.By, v.Reason)
	case history.CompensationRequestedData:
		return byWhom(v.By, v.Reason)
	case history.CompensationStartedData:
		return fmt.Sprintf("%s: steps %v", v.Reason, v.Steps)
	case history.StepCompensatedData:
		return fmt.Sprintf("step %d %s", v.Position, v.Name)
	case history.CompensationFailedData:
		return fmt.Sprintf("step %d %s: %s", v.Position, v.Name, describeError(v.Error))
	case history.TaskCancelledData:
		return fmt.Sprintf("%s; compensated %v", v.Reason, v.Compensated)
	case history.TaskForkedData:
		return fmt.Sprintf("forked as task %s at step %d, %s", v.ForkTaskID, v.Position, byWhom(v.By, ""))
	}
	return ""
}

// describeUsage is what a step reported spending on AI models, as the
// history's details end it: "; gpt-4o 1200+350 tokens $0.0140", one
// entry per model, and the total when there are several; "" for none.
func describeUsage(usage []history.Usage) string {
	if len(usage) == 0 {
		return ""
	}
	var b strings.Builder
	var total float64
	for i, u := range usage {
		sep := "; "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%s %d+%d tokens $%.4f", sep, u.Model, u.InputTokens, u.OutputTokens, u.CostUSD)
		total += u.CostUSD
	}
	if len(usage) > 1 {
		fmt.Fprintf(&b, " (total $%.4f)", total)
	}
	return b.String()
}

func byWhom(by, reason string) string {
	if reason == "" {
		return "by " + by
	}
	return fmt.Sprintf("by %s: %s", by, reason)
}

func describeError(e history.ErrorInfo) string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	if e.Kind != "" {
		fmt.Fprintf(&b, " %s", e.Kind)
	}
	if e.Step != "" {
		fmt.Fprintf(&b, " in step %d %s", e.Position, e.Step)
	}
	fmt.Fprintf(&b, ": %s", truncate(e.Message, 120))
	if e.ClassifiedBy != "" {
		fmt.Fprintf(&b, " [%s]", e.ClassifiedBy)
	}
	return b.String()
}

// taskListFlags are the flags of `cairn task list`.
type taskListFlags struct {
	status, typ string
	limit       int
	cursor      string   // start after this task (a cursor: server.TaskCursor)
	all         bool     // follow the cursor to the last task
	include     []string // payloads to list: input, output
}

// includeHelp is the help of --include.
const includeHelp = "payloads to list too: input, output or input,output (default none: the listing reads no payloads)"

// parseInclude reads --include.
func parseInclude(values []string) (input, output bool, err error) {
	for _, v := range values {
		switch strings.TrimSpace(v) {
		case "input":
			input = true
		case "output":
			output = true
		default:
			return false, false, errmark.Mark(errors.Newf("--include %q: use input, output or input,output", v), configError)
		}
	}
	return input, output, nil
}

// listedTask is a task as a listing prints it in JSON: without input and
// output unless --include named them, as GET /v1/tasks has it.
type listedTask struct {
	*sdk.TaskInfo
	Input  json.RawMessage  `json:"input,omitempty"`
	Output *json.RawMessage `json:"output,omitempty"`
}

func listed(t *sdk.TaskInfo, input, output bool) listedTask {
	l := listedTask{TaskInfo: t}
	if input {
		l.Input = t.Input
	}
	if output {
		l.Output = &t.Output
	}
	return l
}

var taskListLong = fmt.Sprintf(`Lists the namespace's tasks, newest first: at most --limit of them (1 to
%d). When more remain, the cursor of the next page is printed on stderr
("more tasks: --cursor C"); --cursor C lists the page after it, and --all
follows the cursors to the last task (--limit is then the page size,
default %d), printing each page as it arrives. A cursor is the HTTP API's
next_cursor (GET /v1/tasks?cursor=C), so either works in the other.

Listings carry no inputs or outputs unless --include names them (they show
with -o json; 'cairn task show' has them too). A page that includes them is
bounded to %d bytes of them as well as to --limit tasks, and its cursor
continues where it stopped.`, sdk.MaxListLimit, sdk.MaxListLimit, sdk.DefaultMaxListPayloadBytes)

func newTaskListCmd(g *globals) *cobra.Command {
	var f taskListFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first",
		Long:  taskListLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.opts(cmd.Flags().Changed("limit"))
			if err != nil {
				return err
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			return listTasks(cmd, c, opts, f.all, g.output == "json")
		},
	}
	cmd.Flags().StringVar(&f.status, "status", "", "only tasks in this status ("+statusList()+")")
	cmd.Flags().StringVar(&f.typ, "type", "", "only tasks of this type")
	cmd.Flags().IntVar(&f.limit, "limit", 50, fmt.Sprintf("at most this many tasks, 1 to %d (with --all: per page)", sdk.MaxListLimit))
	cmd.Flags().StringVar(&f.cursor, "cursor", "", "list the tasks after this cursor (printed when more remain; the API's next_cursor)")
	cmd.Flags().BoolVar(&f.all, "all", false, "list every task, following the cursor page by page")
	cmd.Flags().StringSliceVar(&f.include, "include", nil, includeHelp)
	return cmd
}

// opts checks the flags; limitSet says whether --limit was given.
func (f *taskListFlags) opts(limitSet bool) (sdk.ListOpts, error) {
	if f.status != "" && !knownStatus(f.status) {
		return sdk.ListOpts{}, errmark.Mark(errors.Newf("--status %q: use one of %s", f.status, statusList()), configError)
	}
	if f.limit < 1 || f.limit > sdk.MaxListLimit {
		return sdk.ListOpts{}, errmark.Mark(errors.Newf("--limit %d: use 1 to %d (--all lists every task, page by page)", f.limit, sdk.MaxListLimit), configError)
	}
	opts := sdk.ListOpts{Status: history.Status(f.status), Type: f.typ, Limit: f.limit}
	var err error
	if opts.IncludeInput, opts.IncludeOutput, err = parseInclude(f.include); err != nil {
		return sdk.ListOpts{}, err
	}
	if f.all && !limitSet {
		opts.Limit = sdk.MaxListLimit
	}
	if f.cursor != "" {
		before, err := server.ParseTaskCursor(f.cursor)
		if err != nil {
			return sdk.ListOpts{}, errmark.Mark(errors.Newf("--cursor %q: not a cursor of a task listing (the one printed after \"more tasks:\", or the API's next_cursor)", f.cursor), configError)
		}
		opts.Before = before
	}
	return opts, nil
}

// listTasks prints the page opts selects, or with all every page from
// there on, each as it arrives. When a page is followed by more tasks
// than it shows, the cursor of the next one goes to stderr, so stdout stays
// a table or one JSON array.
func listTasks(cmd *cobra.Command, c *sdk.Client, opts sdk.ListOpts, all, asJSON bool) error {
	ctx := cmd.Context()
	out := newTaskListPrinter(cmd.OutOrStdout(), asJSON)
	out.input, out.output = opts.IncludeInput, opts.IncludeOutput
	for {
		page, err := c.ListPage(ctx, &opts)
		if err != nil {
			return err
		}
		if err := out.page(page.Tasks); err != nil {
			return err
		}
		if page.Next == uuid.Nil {
			break
		}
		opts.Before = page.Next
		if all {
			continue
		}
		// A full page may be the last: look one task further before
		// saying more remain.
		more, err := c.ListPage(ctx, &sdk.ListOpts{Status: opts.Status, Type: opts.Type, Before: page.Next, Limit: 1})
		if err != nil {
			return err
		}
		if len(more.Tasks) > 0 {
			if err := out.end(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "more tasks: --cursor %s (or --all)\n", server.TaskCursor(page.Next))
			return nil
		}
		break
	}
	return out.end()
}

// taskListPrinter prints pages of tasks as they come: a table with one
// header, or one JSON array laid out as printJSON lays out a slice.
type taskListPrinter struct {
	out   *bufio.Writer
	json  bool
	table *tabwriter.Writer // text only
	n     int               // tasks printed
	// input and output say which payloads the JSON carries.
	input, output bool
}

func newTaskListPrinter(w io.Writer, asJSON bool) *taskListPrinter {
	p := &taskListPrinter{out: bufio.NewWriter(w), json: asJSON}
	if !asJSON {
		p.table = tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0) // as newTable
		fmt.Fprintln(p.table, "ID\tTYPE\tSTATUS\tATTEMPT\tCREATED")
	}
	return p
}

// page prints tasks and flushes them to the output.
func (p *taskListPrinter) page(tasks []*sdk.TaskInfo) error {
	for _, t := range tasks {
		if !p.json {
			fmt.Fprintf(p.table, "%s\t%s@%d\t%s\t%d\t%s\n", t.ID, t.Type, t.TypeVersion, statusText(t, false), t.Attempt, formatTime(&t.CreatedAt))
			continue
		}
		b, err := json.MarshalIndent(listed(t, p.input, p.output), "  ", "  ")
		if err != nil {
			return errors.Wrapf(err, "encode task %s", t.ID)
		}
		sep := ",\n  "
		if p.n == 0 {
			sep = "[\n  "
		}
		_, _ = p.out.WriteString(sep)
		_, _ = p.out.Write(b)
		p.n++
	}
	if p.table != nil {
		if err := p.table.Flush(); err != nil {
			return err
		}
	}
	return p.out.Flush()
}

// end closes the JSON array and flushes.
func (p *taskListPrinter) end() error {
	if p.json {
		if p.n == 0 {
			_, _ = p.out.WriteString("[]\n")
		} else {
			_, _ = p.out.WriteString("\n]\n")
		}
	}
	return p.out.Flush()
}

func knownStatus(s string) bool {
	for _, st := range statuses {
		if string(st) == s {
			return true
		}
	}
	return false
}

func statusList() string {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func notFoundAs(err error, id uuid.UUID, namespace string) error {
	if errors.Is(err, sdk.ErrNotFound) {
		return errors.Newf("task %s not found in namespace %s", id, namespace)
	}
	return err
}

// statusText is a task's status, with what a pending task waits for:
// `pending (waiting for signal "approval" until …)`; the deadline only
// when long (task show), not in a listing's column.
func statusText(info *sdk.TaskInfo, long bool) string {
	w := info.Waiting
	if w == nil {
		return string(info.Status)
	}
	var what string
	switch w.Kind {
	case sdk.WaitingSignal:
		what = fmt.Sprintf("waiting for signal %q", w.Name)
	case sdk.WaitingChildren:
		what = fmt.Sprintf("waiting for %d of %d children, %d finished", w.Children, w.Of, w.Finished)
	case sdk.WaitingTimer:
		what = "sleeping"
	default:
		what = "waiting for " + w.Kind
	}
	if long && w.Deadline != nil {
		what += " until " + formatTime(w.Deadline)
	}
	return fmt.Sprintf("%s (%s)", info.Status, what)
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 MST")
}

// truncate shortens s to at most n runes, never cutting one in half.
func truncate(s string, n int) string {
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	return string(runes[:n]) + "…"
}

// describeSignal is a signal as the history's details show it: its name,
// payload, sender and dedup id.
func describeSignal(v history.SignalReceivedData) string {
	s := v.Name
	if len(v.Payload) > 0 {
		s += " " + truncate(string(v.Payload), 60)
	}
	if v.Sender != "" {
		s += " from " + v.Sender
	}
	if v.DedupID != "" {
		s += " (dedup id " + v.DedupID + ")"
	}
	return s
}
