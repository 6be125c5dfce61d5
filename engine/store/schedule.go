package store

import (
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/robfig/cron/v3"
)

// This file is cron's, whole: the schedule the seam reads and writes, the
// parameters of its statements, what a firing did, and every piece of cron
// arithmetic (parsing, the first tick, the latest missed tick, when a
// skipped tick is tried again, the task a tick starts). The drivers run
// the statements; the firing composite (engine/internal/maintenance) and
// the drivers' ScheduleCreate and SchedulePause do the arithmetic here.

// Schedule is a cron schedule: the seam reads and writes the type users
// get back, [cairntype.Schedule] (one type, not a row type beside it that
// converts to it).
type Schedule = cairntype.Schedule

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

// ScheduleCreateParams is a new schedule ([Executor.ScheduleCreate]). Its
// first tick is the first after the store's now.
type ScheduleCreateParams struct {
	Namespace   string // required
	Name        string // required; once per namespace
	Cron        string // five fields (minute first), an optional leading seconds field, or a descriptor (@hourly)
	Timezone    string // IANA name; "" is UTC
	TaskType    string // required
	TypeVersion int    // 1 or more
	Queue       string // required
	Input       json.RawMessage
	MaxAttempts int
}

// ScheduleListParams lists a namespace's schedules, by name
// ([Executor.ScheduleList]).
type ScheduleListParams struct {
	Namespace string // required
}

// Validate checks the parameters: what every store does first.
func (p *ScheduleListParams) Validate() error {
	return namespaceRequired("list schedules", p == nil || p.Namespace == "")
}

// SchedulePauseParams pauses or resumes a schedule
// ([Executor.SchedulePause]).
type SchedulePauseParams struct {
	Namespace string // required
	Name      string
	// Paused pauses the schedule; false resumes it, from its next tick
	// after now (ticks while paused are not made up).
	Paused bool
}

// Validate checks the parameters: what every store does first.
func (p *SchedulePauseParams) Validate() error {
	return namespaceRequired("pause schedule", p == nil || p.Namespace == "")
}

// ScheduleDeleteParams names a schedule to delete
// ([Executor.ScheduleDelete]).
type ScheduleDeleteParams struct {
	Namespace string // required
	Name      string
}

// Validate checks the parameters: what every store does first.
func (p *ScheduleDeleteParams) Validate() error {
	return namespaceRequired("delete schedule", p == nil || p.Namespace == "")
}

// ScheduleNextDueParams asks when the next active schedule is due
// ([Executor.ScheduleNextDue]).
type ScheduleNextDueParams struct {
	// Namespace restricts the answer to its schedules; "" is every
	// namespace's (the cron service's read).
	Namespace string
}

// ScheduleListDueParams lists the due schedules to fire
// ([Executor.ScheduleListDue]).
type ScheduleListDueParams struct {
	// Namespace restricts the list to its schedules; "" is every
	// namespace's (the cron service's read).
	Namespace string
	// Max bounds how many are listed (and locked).
	Max int
}

// ScheduleMarkFiredParams records a tick fired ([Executor.ScheduleMarkFired]):
// the schedule moves to NextRunAt, its last tick is LastTick, and it is no
// longer skipped.
type ScheduleMarkFiredParams struct {
	Namespace string // required
	Name      string
	NextRunAt time.Time // the next tick after now
	LastTick  time.Time // the tick fired
}

// ScheduleMarkSkippedParams records a tick skipped
// ([Executor.ScheduleMarkSkipped]): the schedule stays at Tick and is due
// again at RetryAt.
type ScheduleMarkSkippedParams struct {
	Namespace string // required
	Name      string
	Tick      time.Time // the tick skipped: the schedule's next run stays there
	RetryAt   time.Time
	SkippedAt time.Time
	Reason    string // ScheduleSkipQueueFull or ScheduleSkipStartFailed
}

// ScheduleFiring is what the firing of due schedules
// (engine/internal/maintenance's FireSchedules) did with one of them.
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

// ScheduleCheck checks a new schedule before a store writes it, setting
// the default time zone, and returns its first tick: the first after now.
func ScheduleCheck(p *ScheduleCreateParams, now time.Time) (first time.Time, err error) {
	if p == nil || p.Namespace == "" || p.Name == "" || p.TaskType == "" || p.Queue == "" || p.TypeVersion < 1 {
		return time.Time{}, errors.New("schedule: namespace, name, task type, version and queue are required")
	}
	if p.Timezone == "" {
		p.Timezone = "UTC"
	}
	sched, loc, err := ParseCron(p.Cron, p.Timezone)
	if err != nil {
		return time.Time{}, errors.Wrapf(err, "schedule %s", p.Name)
	}
	return sched.Next(now.In(loc)), nil
}

// ScheduleNextTick is a schedule's next tick after now, in its time zone:
// where a fired or resumed schedule moves.
func ScheduleNextTick(sc *Schedule, now time.Time) (time.Time, error) {
	sched, loc, err := ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return time.Time{}, errors.Wrapf(err, "schedule %s", sc.Name)
	}
	return sched.Next(now.In(loc)), nil
}

// ScheduleTicks is what firing a due schedule at now works out: the tick
// that fires, where the schedule moves once it fired, and when it is tried
// again if the tick is skipped.
type ScheduleTicks struct {
	// Tick is the latest tick not after now, walking from the schedule's
	// next run, which is due: under the policy "run the latest once", the
	// one missed tick that fires.
	Tick time.Time
	// Next is the first tick after now: the schedule's next run once Tick
	// fired.
	Next time.Time

	sched cron.Schedule
	loc   *time.Location
	now   time.Time
}

// ScheduleDueTicks works out the firing of due schedule sc at now.
func ScheduleDueTicks(sc *Schedule, now time.Time) (ScheduleTicks, error) {
	sched, loc, err := ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return ScheduleTicks{}, errors.Wrapf(err, "schedule %s", sc.Name)
	}
	tick := sc.NextRunAt
	for i := 0; i < maxMissedTicks; i++ {
		n := sched.Next(tick.In(loc))
		if n.After(now) {
			break
		}
		tick = n
	}
	return ScheduleTicks{Tick: normalizeTime(tick), Next: sched.Next(now.In(loc)), sched: sched, loc: loc, now: now}, nil
}

// RetryAt is when a schedule whose tick was refused at now (its queue
// full and hinting retryAfter, or its start failed: ScheduleStartRetry)
// is tried again: after retryAfter, but no later than the schedule's next
// tick (which would fire then anyway, as the latest). It is always after
// now: at least minSkippedTickRetry later, or at a tick still to come, so
// a schedule that keeps being refused is not retried in a loop.
func (t ScheduleTicks) RetryAt(retryAfter time.Duration) time.Time {
	retry := t.now.Add(max(retryAfter, minSkippedTickRetry))
	if next := t.sched.Next(t.now.In(t.loc)); next.Before(retry) {
		retry = next
	}
	return normalizeTime(retry)
}

// maxMissedTicks bounds the walk to the latest missed tick.
const maxMissedTicks = 100_000

// minSkippedTickRetry bounds how often a refused schedule is tried again.
const minSkippedTickRetry = 100 * time.Millisecond

// normalizeTime is t as the stores keep times: UTC, to the microsecond.
func normalizeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// ScheduleTaskAt is the start of sc's task for tick: its idempotency key
// "schedule:<name>:<tick>" makes one task per tick, whoever fires it.
func ScheduleTaskAt(sc *Schedule, tick time.Time) *TaskStartParams {
	return &TaskStartParams{Namespace: sc.Namespace, Scheduled: history.TaskScheduledData{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Input: sc.Input,
		IdempotencyKey: "schedule:" + sc.Name + ":" + tick.Format(time.RFC3339Nano), MaxAttempts: sc.MaxAttempts,
		Labels: map[string]string{"schedule": sc.Name},
	}}
}
