package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Cron schedules: a task of a type at every tick, fired once per tick by the leader",
	}
	cmd.AddCommand(newScheduleCreateCmd(g), newScheduleListCmd(g),
		newScheduleActionCmd(g, "pause", "Pause a schedule: no tick fires until it is resumed", (*sdk.Client).PauseSchedule),
		newScheduleActionCmd(g, "resume", "Resume a schedule from its next tick (ticks while paused are not made up)", (*sdk.Client).ResumeSchedule),
		newScheduleActionCmd(g, "delete", "Delete a schedule (the tasks it started stay)", (*sdk.Client).DeleteSchedule))
	return cmd
}

func newScheduleCreateCmd(g *globals) *cobra.Command {
	var p sdk.ScheduleParams
	var typ, input string
	var version int
	cmd := &cobra.Command{
		Use:   "create NAME --cron EXPR --type TYPE [--version N] [--input JSON] [--tz ZONE] [--queue Q]",
		Short: "Create a cron schedule",
		Long: `Creates a cron schedule: a task of --type with --input starts at every tick
of --cron in --tz, started by the worker holding the leader lease, exactly once
per tick (the tick is part of the task's idempotency key). Ticks missed while
no worker ran fire once, for the latest of them. A tick its full queue refuses
is skipped (schedule list shows it) and tried again later.

  cairn schedule create nightly-report --cron "0 3 * * *" --tz Europe/Berlin --type report.weekly --input '{}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Cron == "" || typ == "" {
				return errmark.Mark(errors.New("--cron and --type are required"), configError)
			}
			if !json.Valid([]byte(input)) {
				return errmark.Mark(errors.Newf("--input %q is not valid JSON", input), configError)
			}
			p.Name, p.Workflow, p.Input = args[0], sdk.TypeRef{Name: typ, Version: version}, json.RawMessage(input)
			c, closeDB, err := g.clientCreating(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := c.CreateSchedule(cmd.Context(), p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s created\n", p.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&p.Cron, "cron", "", `cron expression: "min hour dom month dow", an optional leading seconds field, or @hourly, @daily, @every 1h`)
	cmd.Flags().StringVar(&p.Timezone, "tz", "UTC", "IANA time zone of the expression")
	cmd.Flags().StringVar(&typ, "type", "", "workflow type to start")
	cmd.Flags().IntVar(&version, "version", 1, "workflow type version")
	cmd.Flags().StringVar(&input, "input", "{}", "the task input, JSON")
	cmd.Flags().StringVar(&p.Queue, "queue", "", "queue (default: default)")
	return cmd
}

func newScheduleListCmd(g *globals) *cobra.Command {
	return listCmd(g, "list", "List schedules with their next and last tick",
		"NAME\tCRON\tTZ\tTYPE\tSTATE\tNEXT\tLAST", (*sdk.Client).Schedules,
		func(s cairntype.Schedule) string {
			state := "active"
			switch {
			case s.Paused:
				state = "paused"
			case s.RetryAt != nil: // its last tick was skipped: tried again at RetryAt
				state = "skipped:" + s.LastSkipReason + " (retry " + formatTime(s.RetryAt) + ")"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s@%d\t%s\t%s\t%s", s.Name, s.Cron, s.Timezone, s.TaskType, s.TypeVersion,
				state, formatTime(&s.NextRunAt), formatTime(s.LastTick))
		})
}

func newScheduleActionCmd(g *globals, verb, short string, act func(*sdk.Client, context.Context, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := act(c, cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s: %s\n", args[0], map[string]string{"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb])
			return nil
		},
	}
}
