package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskUsageList implements [store.Store]: the same rows as PostgreSQL's
// (usage.sql), folded by [plan.TaskUsageRows].
func (s *Store) TaskUsageList(ctx context.Context, p *store.TaskUsageListParams) ([]store.TaskUsageFacts, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "TaskUsageList", jsonIDs(p.IDs), p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "task usage")
	}
	defer rows.Close()
	var fold plan.TaskUsageRows
	for rows.Next() {
		var (
			r                     plan.TaskUsageRow
			seq                   sql.NullInt64
			typ, usage, reference sql.NullString
		)
		if err := rows.Scan(&r.TaskID, &r.Type, &r.FairnessKey, &r.Status, &seq, &typ, &usage, &reference); err != nil {
			return nil, errors.Wrap(interpret(err), "task usage")
		}
		if seq.Valid {
			r.Seq = &seq.Int64
		}
		r.EventType, r.Usage, r.Ref = optString(typ), optString(usage), optString(reference)
		if err := fold.Add(r); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, errors.Wrap(interpret(err), "task usage")
	}
	return fold.Facts(), nil
}

func optString(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

// UsageSeries implements [store.Store]: the same sums as PostgreSQL's
// (usage.sql), bounded in time as a diagnosis is.
func (s *Store) UsageSeries(ctx context.Context, p *store.UsageSeriesParams) ([]store.UsageCell, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	readCtx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	var out []store.UsageCell
	err := s.tx(readCtx, func(tx *txn) error {
		rows, err := tx.query(readCtx, "UsageSeries", p.Namespace, us(p.From), us(p.Until), string(p.By), p.Step.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.UsageCell
			if err := rows.Scan(&c.Key, &c.Bucket, &c.InputTokens, &c.OutputTokens, &c.CostUSD, &c.Reports); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, errmark.Mark(errors.Wrapf(err, "usage series: reading %s of history took over %s; try a shorter window",
			p.Until.Sub(p.From), diagnoseTimeout), store.ErrDiagnosisTooSlow)
	}
	return out, errors.Wrap(interpret(err), "usage series")
}
