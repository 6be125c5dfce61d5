package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
)

const auditLong = `Prints the events of the namespace's task histories in a time range, in
order of time, that a CEL expression selects. The expression sees:

  event  type, seq, at (a timestamp), attempt, and data: the event's payload
         under its JSON field names (cairn task history -o json shows them),
         each field present, with its zero value when the stored JSON leaves
         it out (error.status is 0 when there was none); times are
         timestamps, a step's or task's output is its JSON
  task   id, type, version, queue, namespace, status, trace_id, labels,
         fairness_key: the task's state now, not when the event was written

Reading a field the payload does not have is an error for that event (it
is skipped and counted, and the command exits 1 at the end): test the
event type first, or has(event.data.error).

Conditions on event.type, task.type and task.queue joined to the rest with
&& at the top level are also checked by the database, so the audit reads
only those events.

Examples:

  cairn audit 'event.type == "attempt_failed" && event.data.error.status == 429' --since 24h
  cairn audit 'event.type == "task_dead_lettered" && task.type == "crm.sync"' --since 7d -o json
  cairn audit 'event.type == "step_completed" && event.data.name == "ocr" && event.data.output.pages > 50' \
      --since 2026-11-01T00:00:00Z --until 2026-11-02T00:00:00Z

Without an expression every event of the range is printed. -o json prints
one JSON object per line: {"event": {type, seq, at, attempt, data}, "task":
{id, namespace, type, version, queue, status, trace_id, labels,
fairness_key}}.`

// auditFlags are the flags of `cairn audit`.
type auditFlags struct {
	since, until string
	limit        int
	archive      bool
}

func newAuditCmd(g *globals) *cobra.Command {
	f := &auditFlags{}
	cmd := &cobra.Command{
		Use:   "audit [EXPRESSION]",
		Short: "Search the event history: the events of a time range that a CEL expression over event and task selects",
		Long:  auditLong,
		Args:  cobra.MaximumNArgs(1),
		// -o table is a name for the text output here; the root's check
		// knows text and json only.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch g.output {
			case "text", "table", "json":
				return nil
			}
			return errmark.Mark(errors.Newf("--output %q: use table (or text) or json", g.output), configError)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAudit(cmd, g, f, args)
		},
	}
	cmd.Flags().StringVar(&f.since, "since", "24h", "the range starts this long ago (24h, 90m, 7d) or at this RFC 3339 time")
	cmd.Flags().StringVar(&f.until, "until", "", "the range ends (exclusive) this long ago or at this RFC 3339 time; default now")
	cmd.Flags().IntVar(&f.limit, "limit", 1000, "print at most this many events (-1: all)")
	cmd.Flags().BoolVar(&f.archive, "archive", false,
		"search the histories retention archived (the namespace's archive and --default-archive's) instead of the database; events come in the archive's order, by the hour their tasks were created")
	return cmd
}

func runAudit(cmd *cobra.Command, g *globals, f *auditFlags, args []string) error {
	params, err := f.params(time.Now())
	if err != nil {
		return err
	}
	if len(args) == 1 && strings.TrimSpace(args[0]) != "" {
		if params.Filter, err = sdk.CompileEventFilter(args[0]); err != nil {
			return errmark.Mark(err, configError)
		}
	}
	c, closeDB, err := g.client(cmd.Context())
	if err != nil {
		return err
	}
	defer closeDB()
	out := bufio.NewWriter(cmd.OutOrStdout())
	printer := newAuditPrinter(out, g.output == "json")
	printed := 0
	audit := c.Audit
	if f.archive {
		audit = c.AuditArchive
	}
	err = audit(cmd.Context(), params, func(r sdk.AuditRecord) error {
		printed++
		return printer.print(r)
	})
	if ferr := errors.CombineErrors(printer.flush(), out.Flush()); ferr != nil {
		return errors.CombineErrors(err, ferr)
	}
	if f.limit > 0 && printed == f.limit {
		fmt.Fprintf(cmd.ErrOrStderr(), "stopped at --limit %d: more events may match (--limit -1 for all)\n", f.limit)
	}
	return withHint(err)
}

// params turns the flags into the audit's parameters, times relative to
// now.
func (f *auditFlags) params(now time.Time) (sdk.AuditParams, error) {
	var p sdk.AuditParams
	if f.limit == 0 || f.limit < -1 {
		return p, errmark.Mark(errors.Newf("--limit %d: use a positive number, or -1 for all", f.limit), configError)
	}
	p.Limit = max(f.limit, 0)
	var err error
	if p.Since, err = parseAuditTime("since", f.since, now); err != nil {
		return p, err
	}
	p.Until = now
	if f.until != "" {
		if p.Until, err = parseAuditTime("until", f.until, now); err != nil {
			return p, err
		}
	}
	if !p.Since.Before(p.Until) {
		return p, errmark.Mark(errors.Newf("--since %s is not before --until %s", p.Since.Format(time.RFC3339), p.Until.Format(time.RFC3339)), configError)
	}
	return p, nil
}

// parseAuditTime reads a time flag (see server.ParseAuditTime).
func parseAuditTime(flag, value string, now time.Time) (time.Time, error) {
	t, err := server.ParseAuditTime(value, now)
	if err != nil {
		return time.Time{}, errmark.Mark(errors.Newf("--%s %q: give a duration before now (24h, 90m, 7d) or an RFC 3339 time (2026-11-01T00:00:00Z)", flag, value), configError)
	}
	return t, nil
}

// withHint puts an error's hints into its message: main prints the message
// only.
func withHint(err error) error {
	if hint := errors.FlattenHints(err); err != nil && hint != "" {
		return errors.Newf("%v\nhint: %s", err, hint)
	}
	return err
}

// auditPrinter prints audit records as JSON lines or as a table.
type auditPrinter struct {
	json  *json.Encoder     // -o json
	table *tabwriter.Writer // otherwise
}

func newAuditPrinter(out io.Writer, asJSON bool) *auditPrinter {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false) // expressions in payloads keep their > and &&
		return &auditPrinter{json: enc}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0) // as newTable
	fmt.Fprintln(tw, "AT\tTASK\tTYPE\tEVENT\tATTEMPT\tDETAILS")
	return &auditPrinter{table: tw}
}

func (p *auditPrinter) print(r sdk.AuditRecord) error {
	if p.json != nil {
		return p.json.Encode(r) // one line per record: Encode adds the newline
	}
	attempt := ""
	if r.Event.Attempt > 0 {
		attempt = strconv.Itoa(r.Event.Attempt)
	}
	_, err := fmt.Fprintf(p.table, "%s\t%s\t%s@%d\t%s\t%s\t%s\n", r.Event.At.UTC().Format("2006-01-02 15:04:05.000"),
		r.Task.ID, r.Task.Type, r.Task.Version, r.Event.Type, attempt, auditSummary(r.Event.Payload))
	return err
}

func (p *auditPrinter) flush() error {
	if p.table != nil {
		return p.table.Flush()
	}
	return nil
}

// auditSummary is the DETAILS column: what `task history` says of the
// event, with the status of a failure in front.
func auditSummary(p history.Payload) string {
	s := eventDetails(p)
	if e := payloadError(p); e != nil && e.Status != 0 {
		s = fmt.Sprintf("status %d: %s", e.Status, s)
	}
	return truncate(s, 100)
}

// payloadError returns the failure evidence a payload carries, if any.
func payloadError(p history.Payload) *history.ErrorInfo {
	switch v := p.(type) {
	case history.AttemptFailedData:
		return &v.Error
	case history.TaskFailedData:
		return &v.Error
	case history.TaskDeadLetteredData:
		return &v.Error
	case history.CompensationFailedData:
		return &v.Error
	}
	return nil
}
