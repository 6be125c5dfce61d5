package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"

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

// ScheduleCreate implements [store.Executor]: the first tick is the first
// after now; a name taken in the namespace is an error marked
// store.ErrConflict.
func (s *Store) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) error {
	sc := *p
	now := s.now()
	first, err := store.ScheduleCheck(&sc, now)
	if err != nil {
		return err
	}
	res, err := s.q.exec(ctx, "ScheduleInsert",
		sc.Namespace, sc.Name, sc.Cron, sc.Timezone, sc.TaskType, sc.TypeVersion, sc.Queue, nullBytes(sc.Input),
		sc.MaxAttempts, us(first), us(now), us(now))
	if err != nil {
		return errors.Wrapf(interpret(err), "create schedule %s", sc.Name)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errmark.Mark(errors.Newf("schedule %s already exists in namespace %s", sc.Name, sc.Namespace), store.ErrConflict)
	}
	s.announce(store.Notification{Ready: true})
	return nil
}

// ScheduleList implements [store.Executor].
func (s *Store) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out, err := querySchedules(ctx, s.q, "ScheduleList", p.Namespace)
	return out, errors.Wrap(err, "list schedules")
}

// SchedulePause implements [store.Executor]: a resumed schedule fires from
// its next tick after now.
func (s *Store) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *txn) error {
		sc, err := scanSchedule(tx.queryRow(ctx, "ScheduleGet", p.Namespace, p.Name))
		if errors.Is(err, sql.ErrNoRows) {
			return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", p.Name, p.Namespace), store.ErrNotFound)
		}
		if err != nil {
			return errors.Wrap(interpret(err), "read schedule")
		}
		now := s.now()
		next, err := store.ScheduleNextTick(&sc, now)
		if err != nil {
			return err
		}
		_, err = tx.exec(ctx, "ScheduleSetPaused", p.Paused, us(next), us(now), p.Namespace, p.Name)
		return errors.Wrapf(interpret(err), "pause schedule %s", p.Name)
	})
}

// ScheduleDelete implements [store.Executor].
func (s *Store) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	res, err := s.q.exec(ctx, "ScheduleDelete", p.Namespace, p.Name)
	if err != nil {
		return errors.Wrapf(interpret(err), "delete schedule %s", p.Name)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", p.Name, p.Namespace), store.ErrNotFound)
	}
	return nil
}

// ScheduleListDue implements [store.Executor]: the due schedules by the
// store's clock, earliest first. In a transaction they stay the firer's
// until it ends, as the transaction holds the store's one writer.
func (s *Store) ScheduleListDue(ctx context.Context, p *store.ScheduleListDueParams) ([]store.Schedule, error) {
	out, err := querySchedules(ctx, s.q, "ScheduleListDue", us(s.now()), p.Namespace, p.Namespace, p.Max)
	return out, errors.Wrap(err, "list due schedules")
}

// ScheduleMarkFired implements [store.Executor].
func (s *Store) ScheduleMarkFired(ctx context.Context, p *store.ScheduleMarkFiredParams) error {
	_, err := s.q.exec(ctx, "ScheduleFired", us(p.NextRunAt), us(p.LastTick), us(s.now()), p.Namespace, p.Name)
	return errors.Wrapf(interpret(err), "advance schedule %s", p.Name)
}

// ScheduleMarkSkipped implements [store.Executor]: the skip is counted once
// it commits.
func (s *Store) ScheduleMarkSkipped(ctx context.Context, p *store.ScheduleMarkSkippedParams) error {
	_, err := s.q.exec(ctx, "ScheduleSkipped", us(p.Tick), us(p.RetryAt), us(p.SkippedAt), p.Reason, us(s.now()), p.Namespace, p.Name)
	if err != nil {
		return errors.Wrapf(interpret(err), "record the skipped tick of schedule %s", p.Name)
	}
	if s.metrics != nil {
		s.metrics.ObserveScheduleSkipped(store.ScheduleFiring{Namespace: p.Namespace, Name: p.Name, Tick: p.Tick,
			SkipReason: p.Reason, RetryAt: p.RetryAt})
	}
	return nil
}

// ScheduleNextDue implements [store.Executor].
func (s *Store) ScheduleNextDue(ctx context.Context, p *store.ScheduleNextDueParams) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := s.q.queryRow(ctx, "ScheduleNextDue", p.Namespace, p.Namespace).Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpret(err), "read the next schedule tick")
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromUS(next.Int64), true, nil
}
