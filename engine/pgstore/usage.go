package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskUsageList implements [store.Store]: one statement (usage.sql),
// its rows folded by [plan.TaskUsageRows].
func (s *Store) TaskUsageList(ctx context.Context, p *store.TaskUsageListParams) ([]store.TaskUsageFacts, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("TaskUsageList"), pgx.NamedArgs{"ids": p.IDs, "namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "task usage")
	}
	var (
		fold plan.TaskUsageRows
		r    plan.TaskUsageRow
	)
	_, err = pgx.ForEachRow(rows, []any{&r.TaskID, &r.Type, &r.FairnessKey, &r.Status, &r.Seq, &r.EventType, &r.Usage, &r.Ref}, func() error {
		return fold.Add(r)
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "task usage")
	}
	return fold.Facts(), nil
}

// UsageSeries implements [store.Store]: one statement (usage.sql) in a
// read-only transaction bounded as a diagnosis is.
func (s *Store) UsageSeries(ctx context.Context, p *store.UsageSeriesParams) ([]store.UsageCell, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.UsageCell
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly}
	err := s.readTx(ctx, opts, func(tx pgx.Tx) error {
		var now time.Time // SeriesBegin reads the clock too; the window is the caller's
		err := tx.QueryRow(ctx, s.sql("SeriesBegin"), pgx.NamedArgs{
			"statement_timeout": fmt.Sprint(diagnoseStatementTimeout.Milliseconds()),
		}).Scan(new(string), &now)
		if err != nil {
			return errors.Wrap(err, "bound the read")
		}
		rows, err := tx.Query(ctx, s.sql("UsageSeries"), pgx.NamedArgs{
			"namespace": p.Namespace, "by": string(p.By), "from": p.From, "until": p.Until,
			"from_us": p.From.UnixMicro(), "step_us": p.Step.Microseconds(),
		})
		if err != nil {
			return err
		}
		var (
			c       store.UsageCell
			bucket  int32
			reports int64
		)
		_, err = pgx.ForEachRow(rows, []any{&c.Key, &bucket, &c.InputTokens, &c.OutputTokens, &c.CostUSD, &reports}, func() error {
			c.Bucket, c.Reports = int(bucket), int(reports)
			out = append(out, c)
			return nil
		})
		return err
	})
	if isStatementTimeout(err) && ctx.Err() == nil {
		return nil, errmark.Mark(errors.Wrapf(interpretError(err), "usage series: reading %s of history took over %s; try a shorter window",
			p.Until.Sub(p.From), diagnoseStatementTimeout), store.ErrDiagnosisTooSlow)
	}
	return out, errors.Wrap(interpretError(err), "usage series")
}
