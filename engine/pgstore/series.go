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
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
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
		events, err := s.seriesEvents(ctx, tx, args)
		if err != nil {
			return err
		}
		live, err := s.seriesLive(ctx, tx, args)
		if err != nil {
			return err
		}
		out = plan.FoldSeries(w, events, live)
		return nil
	})
	if isStatementTimeout(err) && ctx.Err() == nil {
		return nil, errmark.Mark(errors.Wrapf(interpretError(err), "queue series: reading %s of history took over %s; try a shorter window",
			p.Window, diagnoseStatementTimeout), store.ErrDiagnosisTooSlow)
	}
	return out, errors.Wrap(interpretError(err), "queue series")
}

func (s *Store) seriesEvents(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs) ([]plan.SeriesEvent, error) {
	rows, err := tx.Query(ctx, s.sql("SeriesEvents"), args)
	if err != nil {
		return nil, errors.Wrap(err, "read the window's events")
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (plan.SeriesEvent, error) {
		var e plan.SeriesEvent
		var typ string
		var when *string
		if err := row.Scan(&e.TaskID, &e.Queue, &e.Seq, &typ, &e.At, &when, &e.Before); err != nil {
			return e, err
		}
		e.Type, e.At = history.Type(typ), e.At.UTC()
		e.When, err = plan.SeriesWhen(when)
		return e, err
	})
}

func (s *Store) seriesLive(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs) ([]plan.SeriesLive, error) {
	rows, err := tx.Query(ctx, s.sql("SeriesLive"), args)
	if err != nil {
		return nil, errors.Wrap(err, "read the unfinished tasks")
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (plan.SeriesLive, error) {
		var l plan.SeriesLive
		var dueFrom int32
		var count int64
		err := row.Scan(&l.Queue, &l.Running, &dueFrom, &count)
		l.DueFrom, l.Count = int(dueFrom), int(count)
		return l, err
	})
}
