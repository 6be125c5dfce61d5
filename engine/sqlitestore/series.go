package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// QueueSeries implements [store.Store]: the same rows as PostgreSQL's
// (series.sql), read in one transaction, folded by [plan.FoldSeries].
func (s *Store) QueueSeries(ctx context.Context, p *store.QueueSeriesParams) ([]store.QueueSeries, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	readCtx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	var out []store.QueueSeries
	err := s.tx(readCtx, func(tx *txn) error {
		w := plan.NewSeriesWindow(p, plan.NormalizeTime(s.now()))
		fold := plan.NewSeriesFolder(w)
		if err := seriesEvents(readCtx, tx, p, w, fold); err != nil {
			return err
		}
		if err := seriesLive(readCtx, tx, p, w, fold); err != nil {
			return err
		}
		out = fold.Series()
		return nil
	})
	return out, errors.Wrap(interpret(err), "queue series")
}

// seriesEvents streams the window's events into fold, a row at a time:
// a long window is not held in memory.
func seriesEvents(ctx context.Context, tx *txn, p *store.QueueSeriesParams, w plan.SeriesWindow, fold *plan.SeriesFolder) error {
	rows, err := tx.query(ctx, "SeriesEvents", p.Namespace, us(w.From), us(w.Now), p.Queue)
	if err != nil {
		return errors.Wrap(err, "read the window's events")
	}
	defer rows.Close()
	for rows.Next() {
		var e plan.SeriesEvent
		var typ string
		var at int64
		var when sql.NullString
		if err := rows.Scan(&e.TaskID, &e.Queue, &e.Seq, &typ, &at, &when, &e.Before); err != nil {
			return err
		}
		e.Type, e.At = history.Type(typ), fromUS(at)
		if when.Valid {
			if e.When, err = plan.SeriesWhen(&when.String); err != nil {
				return err
			}
		}
		fold.AddEvent(e)
	}
	return rows.Err()
}

func seriesLive(ctx context.Context, tx *txn, p *store.QueueSeriesParams, w plan.SeriesWindow, fold *plan.SeriesFolder) error {
	rows, err := tx.query(ctx, "SeriesLive", p.Namespace, us(w.From), us(w.Now), p.Queue, w.Buckets, w.Step.Microseconds())
	if err != nil {
		return errors.Wrap(err, "read the unfinished tasks")
	}
	defer rows.Close()
	for rows.Next() {
		var l plan.SeriesLive
		if err := rows.Scan(&l.Queue, &l.Running, &l.DueFrom, &l.Count); err != nil {
			return err
		}
		fold.AddLive(l)
	}
	return rows.Err()
}
