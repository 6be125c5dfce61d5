package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// QueueSeries implements [store.Store]: the window's events and the
// untouched unfinished tasks, read in one read-only snapshot with the
// database clock, folded by [plan.FoldSeries].
func (s *Store) QueueSeries(ctx context.Context, p *store.QueueSeriesParams) ([]store.QueueSeries, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.QueueSeries
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := s.readTx(ctx, opts, func(tx pgx.Tx) error {
		var now time.Time
		err := tx.QueryRow(ctx, s.sql("SeriesBegin"), pgx.NamedArgs{
			"statement_timeout": fmt.Sprint(diagnoseStatementTimeout.Milliseconds()),
		}).Scan(new(string), &now)
		if err != nil {
			return errors.Wrap(err, "read the database clock")
		}
		w := plan.NewSeriesWindow(p, now.UTC())
		args := pgx.NamedArgs{"namespace": p.Namespace, "queue": p.Queue, "from": w.From, "now": w.Now,
			"buckets": w.Buckets, "step_us": w.Step.Microseconds()}
		fold := plan.NewSeriesFolder(w)
		if err := s.seriesEvents(ctx, tx, args, fold); err != nil {
			return err
		}
		if err := s.seriesLive(ctx, tx, args, fold); err != nil {
			return err
		}
		out = fold.Series()
		return nil
	})
	if isStatementTimeout(err) && ctx.Err() == nil {
		return nil, errmark.Mark(errors.Wrapf(interpretError(err), "queue series: reading %s of history took over %s; try a shorter window",
			p.Window, diagnoseStatementTimeout), store.ErrDiagnosisTooSlow)
	}
	return out, errors.Wrap(interpretError(err), "queue series")
}

// seriesEvents streams the window's events into fold, a row at a time:
// a long window is not held in memory.
func (s *Store) seriesEvents(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, fold *plan.SeriesFolder) error {
	rows, err := tx.Query(ctx, s.sql("SeriesEvents"), args)
	if err != nil {
		return errors.Wrap(err, "read the window's events")
	}
	var (
		e    plan.SeriesEvent
		typ  string
		when *string
	)
	_, err = pgx.ForEachRow(rows, []any{&e.TaskID, &e.Queue, &e.Seq, &typ, &e.At, &when, &e.Before}, func() error {
		ev := e
		ev.Type, ev.At = history.Type(typ), e.At.UTC()
		var err error
		if ev.When, err = plan.SeriesWhen(when); err != nil {
			return err
		}
		fold.AddEvent(ev)
		return nil
	})
	return errors.Wrap(err, "read the window's events")
}

func (s *Store) seriesLive(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, fold *plan.SeriesFolder) error {
	rows, err := tx.Query(ctx, s.sql("SeriesLive"), args)
	if err != nil {
		return errors.Wrap(err, "read the unfinished tasks")
	}
	var (
		l       plan.SeriesLive
		dueFrom int32
		count   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&l.Queue, &l.Running, &dueFrom, &count}, func() error {
		fold.AddLive(plan.SeriesLive{Queue: l.Queue, Running: l.Running, DueFrom: int(dueFrom), Count: int(count)})
		return nil
	})
	return errors.Wrap(err, "read the unfinished tasks")
}
