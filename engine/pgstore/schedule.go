package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ScheduleCreate stores a new schedule; its first tick is the first after
// now. A name already used in the namespace is an error marked ErrConflict.
func (s *Store) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) error {
	sc := *p
	first, err := store.ScheduleCheck(&sc, s.now())
	if err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.sql("ScheduleInsert"), pgx.NamedArgs{
		"namespace": sc.Namespace, "name": sc.Name, "cron": sc.Cron, "timezone": sc.Timezone,
		"task_type": sc.TaskType, "type_version": sc.TypeVersion, "queue": sc.Queue, "input": nullJSONString(sc.Input),
		"max_attempts": sc.MaxAttempts, "next_run_at": first,
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
func (s *Store) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("ScheduleList"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list schedules")
	}
	out, err := pgx.CollectRows(rows, scanSchedule)
	return out, errors.Wrap(interpretError(err), "list schedules")
}

// SchedulePause pauses (p.Paused) or resumes a schedule. A resumed
// schedule fires from its next tick after now: ticks while paused are not
// made up.
func (s *Store) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql("ScheduleGetForUpdate"), pgx.NamedArgs{"namespace": p.Namespace, "name": p.Name})
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		sc, err := pgx.CollectExactlyOneRow(rows, scanSchedule)
		if errors.Is(err, pgx.ErrNoRows) {
			return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", p.Name, p.Namespace), store.ErrNotFound)
		}
		if err != nil {
			return errors.Wrap(interpretError(err), "read schedule")
		}
		next, err := store.ScheduleNextTick(&sc, s.now())
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql("ScheduleSetPaused"), pgx.NamedArgs{
			"namespace": p.Namespace, "name": p.Name, "paused": p.Paused, "next_run_at": next,
		})
		return errors.Wrapf(interpretError(err), "pause schedule %s", p.Name)
	})
}

// ScheduleDelete removes a schedule; tasks it started are not touched.
func (s *Store) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.sql("ScheduleDelete"), pgx.NamedArgs{"namespace": p.Namespace, "name": p.Name})
	if err != nil {
		return errors.Wrapf(interpretError(err), "delete schedule %s", p.Name)
	}
	if tag.RowsAffected() == 0 {
		return errmark.Mark(errors.Newf("schedule %s not found in namespace %s", p.Name, p.Namespace), store.ErrNotFound)
	}
	return nil
}

// ScheduleListDue lists the due schedules, earliest first, locked FOR
// UPDATE SKIP LOCKED: until the transaction ends, another firer's list
// skips them. Due is by the database clock (in a transaction, its start).
func (s *Store) ScheduleListDue(ctx context.Context, p *store.ScheduleListDueParams) ([]store.Schedule, error) {
	rows, err := s.db.Query(ctx, s.sql("ScheduleListDue"), pgx.NamedArgs{"namespace": p.Namespace, "max": p.Max})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list due schedules")
	}
	out, err := pgx.CollectRows(rows, scanSchedule)
	return out, errors.Wrap(interpretError(err), "list due schedules")
}

// ScheduleMarkFired records a schedule's fired tick and moves it to its
// next run.
func (s *Store) ScheduleMarkFired(ctx context.Context, p *store.ScheduleMarkFiredParams) error {
	_, err := s.db.Exec(ctx, s.sql("ScheduleFired"), pgx.NamedArgs{
		"namespace": p.Namespace, "name": p.Name, "next_run_at": p.NextRunAt, "last_tick": p.LastTick,
	})
	return errors.Wrapf(interpretError(err), "advance schedule %s", p.Name)
}

// ScheduleMarkSkipped records a schedule's skipped tick, counted once it
// commits.
func (s *Store) ScheduleMarkSkipped(ctx context.Context, p *store.ScheduleMarkSkippedParams) error {
	_, err := s.db.Exec(ctx, s.sql("ScheduleSkipped"), pgx.NamedArgs{
		"namespace": p.Namespace, "name": p.Name, "next_run_at": p.Tick, "retry_at": p.RetryAt,
		"skipped_at": p.SkippedAt, "reason": p.Reason,
	})
	if err != nil {
		return errors.Wrapf(interpretError(err), "record the skipped tick of schedule %s", p.Name)
	}
	if s.metrics != nil {
		s.metrics.ObserveScheduleSkipped(store.ScheduleFiring{Namespace: p.Namespace, Name: p.Name, Tick: p.Tick,
			SkipReason: p.Reason, RetryAt: p.RetryAt})
	}
	return nil
}

// ScheduleNextDue returns when the next active (not paused) schedule of
// p.Namespace, or of any namespace, is due; ok is false when there is none.
func (s *Store) ScheduleNextDue(ctx context.Context, p *store.ScheduleNextDueParams) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := s.db.QueryRow(ctx, s.sql("ScheduleNextDue"), pgx.NamedArgs{"namespace": p.Namespace}).Scan(&next); err != nil {
		return time.Time{}, false, errors.Wrap(interpretError(err), "read the next schedule tick")
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}
