package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ScheduleCreate stores a new schedule; its first tick is the first after
// now. A name already used in the namespace is an error marked ErrConflict.
func (s *Store) ScheduleCreate(ctx context.Context, sc store.Schedule) error {
	sched, loc, err := sc.Check()
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.sql("ScheduleInsert"), pgx.NamedArgs{
		"namespace": sc.Namespace, "name": sc.Name, "cron": sc.Cron, "timezone": sc.Timezone,
		"task_type": sc.TaskType, "type_version": sc.TypeVersion, "queue": sc.Queue, "input": nullJSONString(sc.Input),
		"max_attempts": sc.MaxAttempts, "next_run_at": sched.Next(s.now().In(loc)),
	})
	if err != nil {
		return errors.Wrapf(interpretError(err), "create schedule %s", sc.Name)
	}
	if tag.RowsAffected() == 0 {
		return errmark.Mark(errors.Newf("schedule %s already exists in namespace %s", sc.Name, sc.Namespace), store.ErrConflict)
	}
	return nil
}

// ScheduleList returns a namespace's schedules by name.
func (s *Store) ScheduleList(ctx context.Context, namespace string) ([]store.Schedule, error) {
	rows, err := s.pool.Query(ctx, s.sql("ScheduleList"), pgx.NamedArgs{"namespace": namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list schedules")
	}
	out, err := pgx.CollectRows(rows, scanSchedule)
	return out, errors.Wrap(interpretError(err), "list schedules")
}

// SchedulePause pauses (paused true) or resumes a schedule. A resumed
// schedule fires from its next tick after now: ticks while paused are not
// made up.
func (s *Store) SchedulePause(ctx context.Context, namespace, name string, paused bool) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql("ScheduleGetForUpdate"), pgx.NamedArgs{"namespace": namespace, "name": name})
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		sc, err := pgx.CollectExactlyOneRow(rows, scanSchedule)
		if errors.Is(err, pgx.ErrNoRows) {
			return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), store.ErrNotFound)
		}
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql("ScheduleSetPaused"), pgx.NamedArgs{
			"namespace": namespace, "name": name, "paused": paused, "next_run_at": sched.Next(s.now().In(loc)),
		})
		return errors.Wrapf(interpretError(err), "pause schedule %s", name)
	})
}

// ScheduleDelete removes a schedule; tasks it started are not touched.
func (s *Store) ScheduleDelete(ctx context.Context, namespace, name string) error {
	tag, err := s.pool.Exec(ctx, s.sql("ScheduleDelete"), pgx.NamedArgs{"namespace": namespace, "name": name})
	if err != nil {
		return errors.Wrapf(interpretError(err), "delete schedule %s", name)
	}
	if tag.RowsAffected() == 0 {
		return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), store.ErrNotFound)
	}
	return nil
}

// ScheduleFireDue starts the task of every due schedule, up to max, and
// returns how many it started. For each, in one transaction with the
// schedule's row locked: the latest tick not after now gets a task whose
// idempotency key is "schedule:<name>:<tick>", so no tick ever makes two
// tasks (not even from two firers), and the schedule moves to its next tick
// after now. It is the leader's work (the rescuer's pass calls it).
func (s *Store) ScheduleFireDue(ctx context.Context, max int) (int, error) {
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
		now := s.now()
		for _, sc := range due {
			sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
			if err != nil {
				return errors.Wrapf(interpretError(err), "schedule %s", sc.Name)
			}
			tick := plan.LatestTick(sched, loc, sc.NextRunAt, now)
			res, err := s.TaskStartTx(ctx, tx, sc.TaskAt(tick))
			if err != nil {
				return errors.Wrapf(interpretError(err), "fire schedule %s", sc.Name)
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

// ScheduleNextDue returns when the next active (not paused) schedule of any
// namespace is due; ok is false when there is none.
func (s *Store) ScheduleNextDue(ctx context.Context) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := s.pool.QueryRow(ctx, s.sql("ScheduleNextDue")).Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpretError(err), "read the next schedule tick")
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}
