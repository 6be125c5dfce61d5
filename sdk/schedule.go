package sdk

import (
	"context"
	"encoding/json"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cockroachdb/errors"
)

// ScheduleParams describe a cron schedule.
type ScheduleParams struct {
	Name string
	// Cron is a five-field expression (minute hour day-of-month month
	// day-of-week), optionally with a leading seconds field, or a
	// descriptor (@hourly, @daily, @every 1h30m).
	Cron string
	// Timezone is an IANA time zone name, e.g. "Europe/Berlin". Default UTC.
	Timezone string
	Workflow WorkflowRef
	Input    any
	// Queue overrides the workflow's queue.
	Queue string
}

// CreateSchedule stores a cron schedule in the client's namespace: a task
// of the workflow starts at each tick, started by whichever worker holds
// the leader lease (within its rescue interval of the tick), exactly once
// per tick whatever the number of workers. Ticks missed while no worker
// ran fire once, for the latest of them. A tick its full queue refuses is
// skipped and tried again later; other schedules are not held up (see
// [cairntype.Schedule]).
func (c *Client) CreateSchedule(ctx context.Context, p ScheduleParams) error {
	if err := validateName("schedule name", p.Name); err != nil {
		return err
	}
	start, err := c.startParams(p.Workflow, p.Input, &StartOpts{Queue: p.Queue})
	if err != nil {
		return errors.Wrapf(err, "schedule %s", p.Name)
	}
	sc := start.Scheduled
	if err := checkPayloadSize("input", sc.Input, c.maxPayload); err != nil {
		// Every tick copies it into a task: it stays in place.
		return errors.Wrapf(errmark.Mark(err, ErrInvalid), "schedule %s", p.Name)
	}
	if _, _, err := store.ParseCron(p.Cron, p.Timezone); err != nil {
		return errors.Wrapf(err, "schedule %s", p.Name)
	}
	return c.store.Schedule(ctx, &store.ScheduleCreateParams{
		Namespace: c.namespace, Name: p.Name, Cron: p.Cron, Timezone: p.Timezone,
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Input: json.RawMessage(sc.Input),
		MaxAttempts: sc.MaxAttempts,
	})
}

// Schedules lists the client's namespace's schedules.
func (c *Client) Schedules(ctx context.Context) ([]cairntype.Schedule, error) {
	schedules, err := c.store.ScheduleList(ctx, &store.ScheduleListParams{Namespace: c.namespace})
	if err != nil {
		return nil, err
	}
	return schedules, c.openSchedules(ctx, schedules)
}

// PauseSchedule pauses a schedule: it fires no tick until resumed.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	return c.store.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: c.namespace, Name: name, Paused: true})
}

// ResumeSchedule resumes a paused schedule from its next tick.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	return c.store.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: c.namespace, Name: name})
}

// DeleteSchedule removes a schedule; the tasks it started stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.store.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Namespace: c.namespace, Name: name})
}
