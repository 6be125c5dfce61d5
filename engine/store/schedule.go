package store

import (
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/robfig/cron/v3"
)

// Schedule is a cron schedule as the seam reads and writes it (users get
// it back as a [cairntype.Schedule], which has the same fields, so one
// converts to the other): at each tick, the leader starts a task of
// TaskType with Input. Ticks missed while no leader ran (or while paused)
// are not made up: the policy is "run the latest once" — one task for the
// latest missed tick, then on schedule again.
//
// A tick whose start its queue refused as full is skipped, not lost at
// once: the schedule is tried again at RetryAt (the queue's retry-after
// hint, or the next tick if that comes first) and then fires its latest
// tick, as after missed ticks. Other schedules fire meanwhile.
type Schedule struct {
	Namespace   string
	Name        string
	Cron        string // five fields (minute first), an optional leading seconds field, or a descriptor (@hourly)
	Timezone    string // IANA name; default UTC
	TaskType    string
	TypeVersion int
	Queue       string
	Input       json.RawMessage
	MaxAttempts int
	Paused      bool
	NextRunAt   time.Time  // the next tick that will fire; while skipped, the tick the queue refused
	LastTick    *time.Time // the last tick fired
	// RetryAt is set while the schedule is skipped: its last tick was
	// refused (LastSkipReason), and it is tried again at RetryAt.
	RetryAt        *time.Time
	LastSkippedAt  *time.Time // when a tick was last skipped; kept after the schedule fires again
	LastSkipReason string     // why: ScheduleSkipQueueFull or ScheduleSkipStartFailed; "" if no tick was ever skipped
}

// The reasons of a skipped tick (Schedule.LastSkipReason), cairntype's:
// ScheduleSkipQueueFull when its queue was full (the start failed with
// ErrQueueFull), ScheduleSkipStartFailed when its task could not be
// started for another reason (its idempotency key taken by another input,
// say): the schedule is tried again at its next tick or after
// ScheduleStartRetry, whichever is first, so one broken schedule neither
// spins the leader nor holds the others.
const (
	ScheduleSkipQueueFull   = cairntype.ScheduleSkipQueueFull
	ScheduleSkipStartFailed = cairntype.ScheduleSkipStartFailed
)

// ScheduleStartRetry is how long a schedule whose start failed waits
// before it is tried again (unless its next tick comes first).
const ScheduleStartRetry = time.Minute

// ScheduleFiring is what [Store.ScheduleFireDue] did with one due
// schedule.
type ScheduleFiring struct {
	Namespace, Name string
	Tick            time.Time // the tick fired, or skipped
	// Started is true when a task was started for Tick; false when its
	// task existed already or the tick was skipped.
	Started bool
	// SkipReason is set when the tick was skipped (ScheduleSkipQueueFull);
	// the schedule is tried again at RetryAt.
	SkipReason string
	RetryAt    time.Time
	// WasSkipped says the schedule's previous try was skipped too: a skip
	// with WasSkipped changes nothing, a firing with it ends the skips.
	WasSkipped bool
	// StartErr is why the start failed, for a ScheduleSkipStartFailed skip.
	StartErr error
}

// Skipped reports whether the tick was skipped.
func (f ScheduleFiring) Skipped() bool { return f.SkipReason != "" }

// cronParser accepts standard five-field expressions, an optional leading
// seconds field, and descriptors such as @daily and @every 1h.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses spec in the time zone tz (IANA name; "" is UTC). The
// error says which of the two is wrong.
func ParseCron(spec, tz string) (cron.Schedule, *time.Location, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, nil, errors.Newf("time zone %q: %v", tz, err)
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, nil, errors.Newf("cron expression %q: %v", spec, err)
	}
	return sched, loc, nil
}

// Check checks a new schedule before a store writes it, setting the
// default time zone, and returns its parsed cron expression and zone.
func (sc *Schedule) Check() (cron.Schedule, *time.Location, error) {
	if sc.Namespace == "" || sc.Name == "" || sc.TaskType == "" || sc.Queue == "" || sc.TypeVersion < 1 {
		return nil, nil, errors.New("schedule: namespace, name, task type, version and queue are required")
	}
	if sc.Timezone == "" {
		sc.Timezone = "UTC"
	}
	sched, loc, err := ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return nil, nil, errors.Wrapf(err, "schedule %s", sc.Name)
	}
	return sched, loc, nil
}

// TaskAt is the start of the schedule's task for tick: its idempotency key
// "schedule:<name>:<tick>" makes one task per tick, whoever fires it.
func (sc Schedule) TaskAt(tick time.Time) *TaskStartParams {
	return &TaskStartParams{Namespace: sc.Namespace, Scheduled: history.TaskScheduledData{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Input: sc.Input,
		IdempotencyKey: "schedule:" + sc.Name + ":" + tick.Format(time.RFC3339Nano), MaxAttempts: sc.MaxAttempts,
		Labels: map[string]string{"schedule": sc.Name},
	}}
}
