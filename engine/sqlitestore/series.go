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
		events, err := seriesEvents(readCtx, tx, p, w)
		if err != nil {
			return err
		}
		live, err := seriesLive(readCtx, tx, p, w)
		if err != nil {
			return err
		}
		out = plan.FoldSeries(w, events, live)
		return nil
	})
	return out, errors.Wrap(interpret(err), "queue series")
}

func seriesEvents(ctx context.Context, tx *txn, p *store.QueueSeriesParams, w plan.SeriesWindow) ([]plan.SeriesEvent, error) {
	rows, err := tx.query(ctx, "SeriesEvents", p.Namespace, us(w.From), us(w.Now), p.Queue)
	if err != nil {
		return nil, errors.Wrap(err, "read the window's events")
	}
	defer rows.Close()
	var out []plan.SeriesEvent
	for rows.Next() {
		var e plan.SeriesEvent
		var typ string
		var at int64
		var when sql.NullString
		if err := rows.Scan(&e.TaskID, &e.Queue, &e.Seq, &typ, &at, &when, &e.Before); err != nil {
			return nil, err
		}
		e.Type, e.At = history.Type(typ), fromUS(at)
		if when.Valid {
			if e.When, err = plan.SeriesWhen(&when.String); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func seriesLive(ctx context.Context, tx *txn, p *store.QueueSeriesParams, w plan.SeriesWindow) ([]plan.SeriesLive, error) {
	rows, err := tx.query(ctx, "SeriesLive", p.Namespace, us(w.From), us(w.Now), p.Queue, w.Buckets, w.Step.Microseconds())
	if err != nil {
		return nil, errors.Wrap(err, "read the unfinished tasks")
	}
	defer rows.Close()
	var out []plan.SeriesLive
	for rows.Next() {
		var l plan.SeriesLive
		if err := rows.Scan(&l.Queue, &l.Running, &l.DueFrom, &l.Count); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
