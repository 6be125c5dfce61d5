package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// scheduleColumns are the columns scanSchedule reads, in its order: the
// /* SCHEDULE_COLUMNS */ of the query files.
const scheduleColumns = "namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, paused, next_run_at, last_tick, " +
	"retry_at, last_skipped_at, last_skip_reason"

func scanSchedule(row scanner) (store.Schedule, error) {
	var sc store.Schedule
	var input, reason sql.NullString
	var next int64
	var last, retry, skipped sql.NullInt64
	err := row.Scan(&sc.Namespace, &sc.Name, &sc.Cron, &sc.Timezone, &sc.TaskType, &sc.TypeVersion, &sc.Queue, &input,
		&sc.MaxAttempts, &sc.Paused, &next, &last, &retry, &skipped, &reason)
	if input.Valid {
		sc.Input = []byte(input.String)
	}
	sc.NextRunAt, sc.LastTick = fromUS(next), timePtr(last)
	sc.RetryAt, sc.LastSkippedAt, sc.LastSkipReason = timePtr(retry), timePtr(skipped), reason.String
	return sc, err
}

func querySchedules(ctx context.Context, q querier, name string, args ...any) ([]store.Schedule, error) {
	rows, err := q.query(ctx, name, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, interpret(rows.Err())
}

// ScheduleCreate implements [store.Store]: the first tick is the first
// after now; a name taken in the namespace is an error marked
// store.ErrConflict.
func (s *Store) ScheduleCreate(ctx context.Context, sc store.Schedule) error {
	sched, loc, err := sc.Check()
	if err != nil {
		return err
	}
	now := s.now()
	res, err := s.q.exec(ctx, "ScheduleInsert",
		sc.Namespace, sc.Name, sc.Cron, sc.Timezone, sc.TaskType, sc.TypeVersion, sc.Queue, nullBytes(sc.Input),
		sc.MaxAttempts, us(sched.Next(now.In(loc))), us(now), us(now))
	if err != nil {
		return errors.Wrapf(interpret(err), "create schedule %s", sc.Name)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errmark.Mark(errors.Newf("schedule %s already exists in namespace %s", sc.Name, sc.Namespace), store.ErrConflict)
	}
	s.announce(store.Notification{Ready: true})
	return nil
}

// ScheduleList implements [store.Store].
func (s *Store) ScheduleList(ctx context.Context, namespace string) ([]store.Schedule, error) {
	out, err := querySchedules(ctx, s.q, "ScheduleList", namespace)
	return out, errors.Wrap(err, "list schedules")
}

// SchedulePause implements [store.Store]: a resumed schedule fires from
// its next tick after now.
func (s *Store) SchedulePause(ctx context.Context, namespace, name string, paused bool) error {
	return s.tx(ctx, func(tx *txn) error {
		sc, err := scanSchedule(tx.queryRow(ctx, "ScheduleGet", namespace, name))
		if errors.Is(err, sql.ErrNoRows) {
			return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), store.ErrNotFound)
		}
		if err != nil {
			return errors.Wrap(interpret(err), "read schedule")
		}
		sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
		if err != nil {
			return err
		}
		_, err = tx.exec(ctx, "ScheduleSetPaused", paused, us(sched.Next(s.now().In(loc))), us(s.now()), namespace, name)
		return errors.Wrapf(interpret(err), "pause schedule %s", name)
	})
}

// ScheduleDelete implements [store.Store].
func (s *Store) ScheduleDelete(ctx context.Context, namespace, name string) error {
	res, err := s.q.exec(ctx, "ScheduleDelete", namespace, name)
	if err != nil {
		return errors.Wrapf(interpret(err), "delete schedule %s", name)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", name, namespace), store.ErrNotFound)
	}
	return nil
}

// ScheduleFireDue implements [store.Store]: each due schedule, in a
// transaction of its own, fires its latest tick not after now (a task whose
// idempotency key is "schedule:<name>:<tick>") and moves to its next tick;
// a tick its full queue refuses is skipped and recorded, and the schedule
// is tried again at plan.SkippedTickRetry.
func (s *Store) ScheduleFireDue(ctx context.Context, max int) ([]store.ScheduleFiring, error) {
	due, err := querySchedules(ctx, s.q, "ScheduleListDue", us(s.now()), max)
	if err != nil {
		return nil, errors.Wrap(err, "list due schedules")
	}
	var out []store.ScheduleFiring
	var errs []error
	started := false
	for _, sc := range due {
		f, ok, err := s.fireSchedule(ctx, sc.Namespace, sc.Name)
		if fs := (*failedStart)(nil); errors.As(err, &fs) {
			f, ok, err = fs.f, true, s.recordFailedStart(ctx, fs)
		}
		if err != nil {
			// One schedule's failure does not hold the others back.
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if !ok {
			continue
		}
		out = append(out, f)
		started = started || f.Started
		if f.Skipped() && s.metrics != nil {
			s.metrics.ObserveScheduleSkipped(f)
		}
	}
	if started {
		s.announce(store.Notification{Ready: true})
	}
	return out, errors.Join(errs...)
}

// fireSchedule fires one schedule if it is still due, in a transaction of
// its own; ok is false when it is not.
func (s *Store) fireSchedule(ctx context.Context, namespace, name string) (f store.ScheduleFiring, ok bool, err error) {
	err = s.tx(ctx, func(tx *txn) error {
		now := s.now()
		sc, err := scanSchedule(tx.queryRow(ctx, "ScheduleGet", namespace, name))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return errors.Wrapf(interpret(err), "read schedule %s", name)
		}
		if sc.Paused || dueAt(sc).After(now) {
			return nil
		}
		sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
		if err != nil {
			return errors.Wrapf(err, "schedule %s", sc.Name)
		}
		tick := plan.LatestTick(sched, loc, sc.NextRunAt, now)
		f = store.ScheduleFiring{Namespace: sc.Namespace, Name: sc.Name, Tick: tick, WasSkipped: sc.RetryAt != nil}
		ok = true
		res, err := startTaskTx(ctx, tx, sc.TaskAt(tick), now)
		var full *store.QueueFullError
		switch {
		case errors.As(err, &full):
			// The refusal wrote nothing: the transaction records the skip.
			f.SkipReason, f.RetryAt = store.ScheduleSkipQueueFull, plan.SkippedTickRetry(sched, loc, now, full.RetryAfter)
			_, err = tx.exec(ctx, "ScheduleSkipped", us(tick), us(f.RetryAt), us(now), f.SkipReason, us(now), sc.Namespace, sc.Name)
			return errors.Wrapf(interpret(err), "record the skipped tick of schedule %s", sc.Name)
		case err != nil && ctx.Err() == nil && !errors.Is(interpret(err), store.ErrUnavailable):
			// Rolled back whole (the start may have written part of the
			// task); ScheduleFireDue records the skip in a transaction of
			// its own.
			f.SkipReason, f.StartErr = store.ScheduleSkipStartFailed, errors.Wrapf(err, "start the task of schedule %s", sc.Name)
			f.RetryAt = plan.SkippedTickRetry(sched, loc, now, store.ScheduleStartRetry)
			return &failedStart{f: f, skippedAt: now}
		case err != nil:
			return errors.Wrapf(err, "fire schedule %s", sc.Name)
		}
		f.Started = !res.Existing
		_, err = tx.exec(ctx, "ScheduleFired", us(sched.Next(now.In(loc))), us(tick), us(now), sc.Namespace, sc.Name)
		return errors.Wrapf(interpret(err), "advance schedule %s", sc.Name)
	})
	return f, ok && err == nil, err
}

// failedStart is a schedule's start that failed for a reason of its own:
// its firing transaction rolled back, the skip is still to record.
type failedStart struct {
	f         store.ScheduleFiring
	skippedAt time.Time
}

func (e *failedStart) Error() string { return e.f.StartErr.Error() }

// recordFailedStart records a failed start as a skipped tick, so the
// schedule waits until f.RetryAt rather than staying first in the due list.
func (s *Store) recordFailedStart(ctx context.Context, fs *failedStart) error {
	f := fs.f
	return s.tx(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "ScheduleSkipped", us(f.Tick), us(f.RetryAt), us(fs.skippedAt), f.SkipReason, us(fs.skippedAt), f.Namespace, f.Name)
		return errors.Wrapf(interpret(err), "record the failed start of schedule %s", f.Name)
	})
}

// dueAt is when a schedule is due: its retry time while skipped, else its
// next tick.
func dueAt(sc store.Schedule) time.Time {
	if sc.RetryAt != nil {
		return *sc.RetryAt
	}
	return sc.NextRunAt
}

// ScheduleNextDue implements [store.Store].
func (s *Store) ScheduleNextDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := s.q.queryRow(ctx, "ScheduleNextDue").Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpret(err), "read the next schedule tick")
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromUS(next.Int64), true, nil
}
