package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
)

// Schedule is a cron schedule: at each tick, the leader starts a task of
// TaskType with Input. Ticks missed while no leader ran (or while paused)
// are not made up: the policy is "run the latest once" — one task for the
// latest missed tick, then on schedule again.
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
	NextRunAt   time.Time  // the next tick that will fire
	LastTick    *time.Time // the last tick fired
}

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

// ScheduleCreate stores a new schedule; its first tick is the first after
// now. A name already used in the namespace is an error marked ErrConflict.
func (s *PGStore) ScheduleCreate(ctx context.Context, sc Schedule) error {
	sched, loc, err := sc.Check()
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.sql("ScheduleInsert"), pgx.NamedArgs{
		"namespace": sc.Namespace, "name": sc.Name, "cron": sc.Cron, "timezone": sc.Timezone,
		"task_type": sc.TaskType, "type_version": sc.TypeVersion, "queue": sc.Queue, "input": nullJSONString(sc.Input),
		"max_attempts": sc.MaxAttempts, "next_run_at": sched.Next(Now().In(loc)),
	})
	if err != nil {
		return errors.Wrapf(interpretError(err), "create schedule %s", sc.Name)
	}
	if tag.RowsAffected() == 0 {
		return errors.Mark(errors.Newf("schedule %s already exists in namespace %s", sc.Name, sc.Namespace), ErrConflict)
	}
	return nil
}

// ScheduleList returns a namespace's schedules by name.
func (s *PGStore) ScheduleList(ctx context.Context, namespace string) ([]Schedule, error) {
	rows, err := s.pool.Query(ctx, s.sql("ScheduleList"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list schedules")
	}
	out, err := pgx.CollectRows(rows, scanSchedule)
	return out, errors.Wrap(interpretError(err), "list schedules")
}

func scanSchedule(row pgx.CollectableRow) (Schedule, error) {
	var sc Schedule
	var input []byte
	err := row.Scan(&sc.Namespace, &sc.Name, &sc.Cron, &sc.Timezone, &sc.TaskType, &sc.TypeVersion, &sc.Queue, &input,
		&sc.MaxAttempts, &sc.Paused, &sc.NextRunAt, &sc.LastTick)
	sc.Input = input
	sc.NextRunAt = sc.NextRunAt.UTC()
	return sc, err
}

// SchedulePause pauses (paused true) or resumes a schedule. A resumed
// schedule fires from its next tick after now: ticks while paused are not
// made up.
func (s *PGStore) SchedulePause(ctx context.Context, namespace, name string, paused bool) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql("ScheduleGetForUpdate"), pgx.NamedArgs{"namespace": namespace, "name": name})
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		sc, err := pgx.CollectExactlyOneRow(rows, scanSchedule)
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), ErrNotFound)
		}
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		sched, loc, err := ParseCron(sc.Cron, sc.Timezone)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql("ScheduleSetPaused"), pgx.NamedArgs{
			"namespace": namespace, "name": name, "paused": paused, "next_run_at": sched.Next(Now().In(loc)),
		})
		return errors.Wrapf(interpretError(err), "pause schedule %s", name)
	})
}

// ScheduleDelete removes a schedule; tasks it started are not touched.
func (s *PGStore) ScheduleDelete(ctx context.Context, namespace, name string) error {
	tag, err := s.pool.Exec(ctx, s.sql("ScheduleDelete"), pgx.NamedArgs{"namespace": namespace, "name": name})
	if err != nil {
		return errors.Wrapf(interpretError(err), "delete schedule %s", name)
	}
	if tag.RowsAffected() == 0 {
		return errors.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), ErrNotFound)
	}
	return nil
}

// maxMissedTicks bounds the walk to the latest missed tick.
const maxMissedTicks = 100_000

// ScheduleFireDue starts the task of every due schedule, up to max, and
// returns how many it started. For each, in one transaction with the
// schedule's row locked: the latest tick not after now gets a task whose
// idempotency key is "schedule:<name>:<tick>", so no tick ever makes two
// tasks (not even from two firers), and the schedule moves to its next tick
// after now. It is the leader's work (the rescuer's pass calls it).
func (s *PGStore) ScheduleFireDue(ctx context.Context, max int) (int, error) {
	fired := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql("ScheduleListDue"), pgx.NamedArgs{"max": max})
		if err != nil {
			return errors.Wrap(interpretError(err), "list due schedules")
		}
		due, err := pgx.CollectRows(rows, scanSchedule)
		if err != nil {
			return errors.Wrap(interpretError(err), "list due schedules")
		}
		now := Now()
		for _, sc := range due {
			sched, loc, err := ParseCron(sc.Cron, sc.Timezone)
			if err != nil {
				return errors.Wrapf(err, "schedule %s", sc.Name)
			}
			tick := LatestTick(sched, loc, sc.NextRunAt, now)
			res, err := s.TaskStartTx(ctx, tx, sc.TaskAt(tick))
			if err != nil {
				return errors.Wrapf(err, "fire schedule %s", sc.Name)
			}
			if !res.Existing {
				fired++
			}
			if _, err := tx.Exec(ctx, s.sql("ScheduleFired"), pgx.NamedArgs{
				"namespace": sc.Namespace, "name": sc.Name, "next_run_at": sched.Next(now.In(loc)), "last_tick": tick,
			}); err != nil {
				return errors.Wrapf(interpretError(err), "advance schedule %s", sc.Name)
			}
		}
		return nil
	})
	return fired, err
}

// LatestTick is the latest tick of sched (in loc) not after now, walking
// from next, the schedule's next tick, which is due: under the policy "run
// the latest once", the one missed tick that fires.
func LatestTick(sched cron.Schedule, loc *time.Location, next, now time.Time) time.Time {
	tick := next
	for i := 0; i < maxMissedTicks; i++ {
		n := sched.Next(tick.In(loc))
		if n.After(now) {
			break
		}
		tick = n
	}
	return normalizeTime(tick)
}

// TaskAt is the start of the schedule's task for tick: its idempotency key
// "schedule:<name>:<tick>" makes one task per tick, whoever fires it.
func (sc Schedule) TaskAt(tick time.Time) *TaskStartParams {
	return &TaskStartParams{Namespace: sc.Namespace, Scheduled: history.Scheduled{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Input: sc.Input,
		IdempotencyKey: "schedule:" + sc.Name + ":" + tick.Format(time.RFC3339Nano), MaxAttempts: sc.MaxAttempts,
		Labels: map[string]string{"schedule": sc.Name},
	}}
}

// ScheduleNextDue returns when the next active (not paused) schedule of any
// namespace is due; ok is false when there is none.
func (s *PGStore) ScheduleNextDue(ctx context.Context) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := s.pool.QueryRow(ctx, s.sql("ScheduleNextDue")).Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpretError(err), "read the next schedule tick")
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}
