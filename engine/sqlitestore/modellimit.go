package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ModelLimitSet implements [store.Executor].
func (s *Store) ModelLimitSet(ctx context.Context, p *store.ModelLimitSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		var n, exists int
		if err := tx.queryRow(ctx, "ModelLimitCount", p.Namespace, p.Model).Scan(&n, &exists); err != nil {
			return interpret(err)
		}
		if exists == 0 && n >= store.MaxModelLimits {
			return errmark.Mark(errors.Newf("namespace %s holds %d model limits already, the most it may", p.Namespace, store.MaxModelLimits),
				store.ErrConflict)
		}
		_, err := tx.exec(ctx, "ModelLimitSet", p.Namespace, p.Model, p.TokensPerMinute, p.RequestsPerMinute, us(s.now()))
		return interpret(err)
	})
	if err != nil {
		return errors.Wrapf(err, "set model limit %s", p.Model)
	}
	s.announce(store.Notification{Models: []store.ModelKey{{Namespace: p.Namespace, Model: p.Model}}})
	return nil
}

// ModelLimitList implements [store.Executor].
func (s *Store) ModelLimitList(ctx context.Context, p *store.ModelLimitListParams) ([]store.ModelLimit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "ModelLimitList", p.Namespace)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list model limits")
	}
	defer rows.Close()
	var out []store.ModelLimit
	for rows.Next() {
		var l store.ModelLimit
		var at int64
		if err := rows.Scan(&l.Namespace, &l.Model, &l.TokensPerMinute, &l.RequestsPerMinute, &at); err != nil {
			return nil, errors.Wrap(interpret(err), "list model limits")
		}
		l.UpdatedAt = fromUS(at)
		out = append(out, l)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list model limits")
}

// ModelLimitDelete implements [store.Executor].
func (s *Store) ModelLimitDelete(ctx context.Context, p *store.ModelLimitDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "ModelLimitDelete", p.Namespace, p.Model)
		if err != nil {
			return interpret(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Wrapf(errors.CombineErrors(store.ErrNotFound, err), "no limit in namespace %s", p.Namespace)
		}
		_, err = tx.exec(ctx, "ModelLimitDeleteTickets", p.Namespace, p.Model)
		return interpret(err)
	})
	if err != nil {
		return errors.Wrapf(err, "delete model limit %s", p.Model)
	}
	s.announce(store.Notification{Models: []store.ModelKey{{Namespace: p.Namespace, Model: p.Model}}})
	return nil
}

// ModelAdmit implements [store.Executor]: one write transaction, so
// admissions are decided one at a time.
func (s *Store) ModelAdmit(ctx context.Context, p *store.ModelAdmitParams) (store.ModelAdmission, error) {
	if err := p.Validate(); err != nil {
		return store.ModelAdmission{}, err
	}
	now := p.Now
	if now.IsZero() {
		now = s.now()
	}
	now = now.UTC().Truncate(time.Microsecond)
	since := now.Add(-store.ModelLimitWindow)
	// Admissions stamped ahead of this process's clock (another's runs
	// ahead) count: a skewed worker must not admit past the limit.
	until := now.Add(store.ModelLimitWindow)
	ticket := p.Ticket.String()
	var out store.ModelAdmission
	err := s.tx(ctx, func(tx *txn) error {
		out = store.ModelAdmission{}
		var served, updated int64
		l := &out.Limit
		err := tx.queryRow(ctx, "ModelLimitGet", p.Namespace, p.Model).Scan(&l.Namespace, &l.Model, &l.TokensPerMinute, &l.RequestsPerMinute, &updated, &served)
		if errors.Is(err, sql.ErrNoRows) {
			out.Limit = store.ModelLimit{}
			return nil
		}
		if err != nil {
			return interpret(err)
		}
		out.Limited, l.UpdatedAt = true, fromUS(updated)
		if _, err := tx.exec(ctx, "ModelTicketsExpire", p.Namespace, p.Model, us(now)); err != nil {
			return interpret(err)
		}
		if err := tx.queryRow(ctx, "ModelWindowUse", p.Namespace, p.Model, us(since), us(until)).Scan(&out.UsedTokens, &out.UsedRequests); err != nil {
			return interpret(err)
		}
		var mine, keyLast sql.NullInt64
		var head sql.NullString
		if err := tx.queryRow(ctx, "ModelTicketTurn", p.Namespace, p.Model, ticket, p.FairnessKey).Scan(&mine, &head, &keyLast); err != nil {
			return interpret(err)
		}
		first := !head.Valid || head.String == ticket
		if first && store.ModelFits(out.Limit, out.UsedTokens, out.UsedRequests, p.Tokens) {
			out.Admitted = true
			if _, err := tx.exec(ctx, "ModelAdmitInsert", ticket, p.Namespace, p.Model, us(now), p.Tokens, p.TaskID.String(),
				p.Position, p.FairnessKey, p.Owner); err != nil {
				return interpret(err)
			}
			if mine.Valid {
				if _, err := tx.exec(ctx, "ModelAdmitServed", ticket); err != nil {
					return interpret(err)
				}
				if _, err := tx.exec(ctx, "ModelServedRound", p.Namespace, p.Model, mine.Int64); err != nil {
					return interpret(err)
				}
			}
			return nil
		}
		round := mine.Int64
		if !mine.Valid {
			round = store.ModelTicketRound(served, keyLast.Int64)
		}
		if _, err := tx.exec(ctx, "ModelTicketPut", ticket, p.Namespace, p.Model, p.FairnessKey, round, p.Tokens, p.TaskID.String(),
			p.Position, p.Owner, us(now), us(now.Add(p.TicketTTL))); err != nil {
			return interpret(err)
		}
		if err := tx.queryRow(ctx, "ModelTicketAhead", ticket, p.Namespace, p.Model).Scan(&out.Ahead); err != nil {
			return interpret(err)
		}
		if out.Ahead > 0 {
			return nil
		}
		var at int64
		err = tx.queryRow(ctx, "ModelRetryAt", p.Namespace, p.Model, us(since), us(until), l.TokensPerMinute, l.RequestsPerMinute,
			out.UsedTokens, out.UsedRequests, p.Tokens).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return interpret(err)
		}
		out.RetryAt = fromUS(at).Add(store.ModelLimitWindow)
		return nil
	})
	if err != nil {
		return store.ModelAdmission{}, errors.Wrapf(err, "admit a step of task %s under model limit %s", p.TaskID, p.Model)
	}
	if out.Admitted {
		s.announce(store.Notification{Models: []store.ModelKey{{Namespace: p.Namespace, Model: p.Model}}})
	}
	return out, nil
}

// ModelSettle implements [store.Executor].
func (s *Store) ModelSettle(ctx context.Context, p *store.ModelSettleParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var model string
	var reserved int64
	err := s.tx(ctx, func(tx *txn) error {
		err := tx.queryRow(ctx, "ModelSettle", p.Admission.String(), p.Namespace, p.Tokens).Scan(&model, &reserved)
		if errors.Is(err, sql.ErrNoRows) {
			return errors.Wrap(store.ErrNotFound, "not reserved")
		}
		return interpret(err)
	})
	if err != nil {
		return errors.Wrapf(err, "settle model admission %s", p.Admission)
	}
	if p.Tokens < reserved {
		s.announce(store.Notification{Models: []store.ModelKey{{Namespace: p.Namespace, Model: model}}})
	}
	return nil
}

// ModelTicketDrop implements [store.Executor].
func (s *Store) ModelTicketDrop(ctx context.Context, p *store.ModelTicketDropParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var models []string
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "ModelTicketDrop", p.Ticket.String(), p.Namespace)
		if err != nil {
			return interpret(err)
		}
		defer rows.Close()
		for rows.Next() {
			var m string
			if err := rows.Scan(&m); err != nil {
				return interpret(err)
			}
			models = append(models, m)
		}
		return interpret(rows.Err())
	})
	if err != nil {
		return errors.Wrapf(err, "drop model ticket %s", p.Ticket)
	}
	for _, m := range models {
		s.announce(store.Notification{Models: []store.ModelKey{{Namespace: p.Namespace, Model: m}}})
	}
	return nil
}

// ModelAdmissionRemoveOld implements [store.Executor].
func (s *Store) ModelAdmissionRemoveOld(ctx context.Context, p *store.ModelAdmissionRemoveOldParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	before := us(s.now().Add(-p.Keep))
	var n int64
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "ModelAdmissionRemoveOld", before, p.Max)
		if err != nil {
			return interpret(err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.exec(ctx, "ModelTicketRemoveOld", before, p.Max)
		return interpret(err)
	})
	if err != nil {
		return 0, errors.Wrap(err, "remove model admissions")
	}
	return int(n), nil
}
