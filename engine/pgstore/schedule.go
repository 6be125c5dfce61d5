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
	tag, err := s.db.Exec(ctx, s.sql("ScheduleInsert"), pgx.NamedArgs{
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
	rows, err := s.db.Query(ctx, s.sql("ScheduleList"), pgx.NamedArgs{"namespace": namespace})
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
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
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
	tag, err := s.db.Exec(ctx, s.sql("ScheduleDelete"), pgx.NamedArgs{"namespace": namespace, "name": name})
	if err != nil {
		return errors.Wrapf(interpretError(err), "delete schedule %s", name)
	}
	if tag.RowsAffected() == 0 {
		return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), store.ErrNotFound)
	}
	return nil
}

// ScheduleFireDue fires every due schedule, up to max, each in a
// transaction of its own with its row locked (another firer skips it), and
// returns what it did with each. The latest tick not after now gets a task
// whose idempotency key is "schedule:<name>:<tick>", so no tick ever makes
// two tasks (not even from two firers), and the schedule moves to its next
// tick after now. A tick its queue refuses as full is skipped: the skip is
// recorded on the schedule, which is tried again at
// [plan.SkippedTickRetry], and the other schedules fire all the same. It is
// the leader's work (the rescuer's pass calls it).
func (s *Store) ScheduleFireDue(ctx context.Context, max int) ([]store.ScheduleFiring, error) {
	rows, err := s.db.Query(ctx, s.sql("ScheduleListDue"), pgx.NamedArgs{"max": max})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list due schedules")
	}
	due, err := pgx.CollectRows(rows, pgx.RowToStructByPos[scheduleRef])
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list due schedules")
	}
	var out []store.ScheduleFiring
	var errs []error
	for _, ref := range due {
		f, ok, err := s.fireSchedule(ctx, ref)
		switch {
		case err != nil && (ctx.Err() != nil || errors.Is(err, store.ErrUnavailable)):
			return out, errors.Join(append(errs, err)...)
		case err != nil:
			// One schedule's failure does not hold the others back.
			errs = append(errs, err)
		case ok:
			out = append(out, f)
			if f.Skipped() && s.metrics != nil {
				s.metrics.ObserveScheduleSkipped(f)
			}
		}
	}
	return out, errors.Join(errs...)
}

// startFailedFor reports whether a schedule's start failed for a reason of
// its own (recorded as a skip), not because the database is out of reach
// or the caller gave up (which the leader retries at its next pass).
func startFailedFor(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(interpretError(err), store.ErrUnavailable) && !errors.Is(err, store.ErrRetryable)
}

// scheduleRef names a schedule: a row of ScheduleListDue.
type scheduleRef struct{ Namespace, Name string }

// fireSchedule fires one due schedule in a transaction of its own; ok is
// false when it is no longer due or another firer holds it.
func (s *Store) fireSchedule(ctx context.Context, ref scheduleRef) (f store.ScheduleFiring, ok bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql("ScheduleGetDueForUpdate"), pgx.NamedArgs{"namespace": ref.Namespace, "name": ref.Name})
		if err != nil {
			return errors.Wrapf(interpretError(err), "read schedule %s", ref.Name)
		}
		sc, err := pgx.CollectExactlyOneRow(rows, scanSchedule)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return errors.Wrapf(interpretError(err), "read schedule %s", ref.Name)
		}
		sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
		if err != nil {
			return errors.Wrapf(err, "schedule %s", sc.Name)
		}
		now := s.now()
		tick := plan.LatestTick(sched, loc, sc.NextRunAt, now)
		f = store.ScheduleFiring{Namespace: sc.Namespace, Name: sc.Name, Tick: tick, WasSkipped: sc.RetryAt != nil}
		ok = true
		// In a savepoint: a refused start leaves the transaction usable
		// for recording the skip.
		var full *store.QueueFullError
		err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			res, err := s.taskStartMany(ctx, sp, []*store.TaskStartParams{sc.TaskAt(tick)})
			f.Started = err == nil && !res[0].Existing
			return err
		})
		switch {
		case errors.As(err, &full):
			f.SkipReason, f.RetryAt = store.ScheduleSkipQueueFull, plan.SkippedTickRetry(sched, loc, now, full.RetryAfter)
			_, err = tx.Exec(ctx, s.sql("ScheduleSkipped"), pgx.NamedArgs{
				"namespace": sc.Namespace, "name": sc.Name, "next_run_at": tick, "retry_at": f.RetryAt,
				"skipped_at": now, "reason": f.SkipReason,
			})
			return errors.Wrapf(interpretError(err), "record the skipped tick of schedule %s", sc.Name)
		case err != nil && startFailedFor(ctx, err):
			// The savepoint undid the start; the skip is recorded so the
			// broken schedule waits instead of holding the due list.
			f.SkipReason, f.StartErr = store.ScheduleSkipStartFailed, errors.Wrapf(err, "start the task of schedule %s", sc.Name)
			f.RetryAt = plan.SkippedTickRetry(sched, loc, now, store.ScheduleStartRetry)
			_, err = tx.Exec(ctx, s.sql("ScheduleSkipped"), pgx.NamedArgs{
				"namespace": sc.Namespace, "name": sc.Name, "next_run_at": tick, "retry_at": f.RetryAt,
				"skipped_at": now, "reason": f.SkipReason,
			})
			return errors.Wrapf(interpretError(err), "record the failed start of schedule %s", sc.Name)
		case err != nil:
			return errors.Wrapf(interpretError(err), "fire schedule %s", sc.Name)
		}
		_, err = tx.Exec(ctx, s.sql("ScheduleFired"), pgx.NamedArgs{
			"namespace": sc.Namespace, "name": sc.Name, "next_run_at": sched.Next(now.In(loc)), "last_tick": tick,
		})
		return errors.Wrapf(interpretError(err), "advance schedule %s", sc.Name)
	})
	return f, ok && err == nil, err
}

// ScheduleNextDue returns when the next active (not paused) schedule of any
// namespace is due; ok is false when there is none.
func (s *Store) ScheduleNextDue(ctx context.Context) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := s.db.QueryRow(ctx, s.sql("ScheduleNextDue")).Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpretError(err), "read the next schedule tick")
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}
