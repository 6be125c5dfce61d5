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
const scheduleColumns = "namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, paused, next_run_at, last_tick"

func scanSchedule(row scanner) (store.Schedule, error) {
	var sc store.Schedule
	var input sql.NullString
	var next int64
	var last sql.NullInt64
	err := row.Scan(&sc.Namespace, &sc.Name, &sc.Cron, &sc.Timezone, &sc.TaskType, &sc.TypeVersion, &sc.Queue, &input,
		&sc.MaxAttempts, &sc.Paused, &next, &last)
	if input.Valid {
		sc.Input = []byte(input.String)
	}
	sc.NextRunAt, sc.LastTick = fromUS(next), timePtr(last)
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

// ScheduleFireDue implements [store.Store]: each due schedule's latest
// tick not after now starts a task whose idempotency key is
// "schedule:<name>:<tick>", and the schedule moves to its next tick, in
// one transaction.
func (s *Store) ScheduleFireDue(ctx context.Context, max int) (int, error) {
	fired := 0
	err := s.tx(ctx, func(tx *txn) error {
		now := s.now()
		due, err := querySchedules(ctx, tx, "ScheduleListDue", us(now), max)
		if err != nil {
			return errors.Wrap(err, "list due schedules")
		}
		for _, sc := range due {
			sched, loc, err := store.ParseCron(sc.Cron, sc.Timezone)
			if err != nil {
				return errors.Wrapf(err, "schedule %s", sc.Name)
			}
			tick := plan.LatestTick(sched, loc, sc.NextRunAt, now)
			res, err := startTaskTx(ctx, tx, sc.TaskAt(tick), now)
			if err != nil {
				return errors.Wrapf(err, "fire schedule %s", sc.Name)
			}
			if !res.Existing {
				fired++
			}
			if _, err := tx.exec(ctx, "ScheduleFired", us(sched.Next(now.In(loc))), us(tick), us(now), sc.Namespace, sc.Name); err != nil {
				return errors.Wrapf(interpret(err), "advance schedule %s", sc.Name)
			}
		}
		return nil
	})
	if err == nil && fired > 0 {
		s.announce(store.Notification{Ready: true})
	}
	return fired, err
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
