package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ModelLimitSet implements [store.Executor].
func (s *Store) ModelLimitSet(ctx context.Context, p *store.ModelLimitSetParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRow(ctx, s.sql("ModelLimitSet"), pgx.NamedArgs{
		"namespace": p.Namespace, "model": p.Model, "tpm": p.TokensPerMinute, "rpm": p.RequestsPerMinute, "now": s.now(),
		"max": store.MaxModelLimits, "channel": s.modelChannel,
	}).Scan(&n)
	if err == nil && n == 0 {
		return errmark.Mark(errors.Newf("set model limit %s: namespace %s holds %d model limits already, the most it may",
			p.Model, p.Namespace, store.MaxModelLimits), store.ErrConflict)
	}
	return errors.Wrapf(interpretError(err), "set model limit %s", p.Model)
}

// ModelLimitList implements [store.Executor].
func (s *Store) ModelLimitList(ctx context.Context, p *store.ModelLimitListParams) ([]store.ModelLimit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("ModelLimitList"), pgx.NamedArgs{"namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list model limits")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ModelLimit, error) {
		var l store.ModelLimit
		err := row.Scan(&l.Namespace, &l.Model, &l.TokensPerMinute, &l.RequestsPerMinute, &l.UpdatedAt)
		l.UpdatedAt = l.UpdatedAt.UTC()
		return l, err
	})
	return out, errors.Wrap(interpretError(err), "list model limits")
}

// ModelLimitDelete implements [store.Executor].
func (s *Store) ModelLimitDelete(ctx context.Context, p *store.ModelLimitDeleteParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRow(ctx, s.sql("ModelLimitDelete"), pgx.NamedArgs{
		"namespace": p.Namespace, "model": p.Model, "channel": s.modelChannel,
	}).Scan(&n)
	if err == nil && n == 0 {
		err = errors.Wrapf(store.ErrNotFound, "no limit in namespace %s", p.Namespace)
	}
	return errors.Wrapf(interpretError(err), "delete model limit %s", p.Model)
}

// ModelAdmit implements [store.Executor]: its statements run in one
// transaction that holds the model's limit row locked, so admissions of
// one model are decided one at a time across workers.
func (s *Store) ModelAdmit(ctx context.Context, p *store.ModelAdmitParams) (store.ModelAdmission, error) {
	if err := p.Validate(); err != nil {
		return store.ModelAdmission{}, err
	}
	now := p.Now
	if now.IsZero() {
		now = s.now()
	}
	now = now.UTC().Truncate(time.Microsecond)
	key := pgx.NamedArgs{"namespace": p.Namespace, "model": p.Model, "now": now, "since": now.Add(-store.ModelLimitWindow),
		// Admissions stamped ahead of this worker's clock (another's runs
		// ahead) count: a skewed worker must not admit past the limit.
		"until": now.Add(store.ModelLimitWindow)}
	args := func(more pgx.NamedArgs) pgx.NamedArgs {
		out := pgx.NamedArgs{}
		for k, v := range key {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	var out store.ModelAdmission
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		out = store.ModelAdmission{}
		var served int64
		l := &out.Limit
		err := tx.QueryRow(ctx, s.sql("ModelLimitLock"), key).Scan(&l.Namespace, &l.Model, &l.TokensPerMinute, &l.RequestsPerMinute, &l.UpdatedAt, &served)
		if errors.Is(err, pgx.ErrNoRows) {
			out.Limit = store.ModelLimit{}
			return nil // no limit: nothing to write
		}
		if err != nil {
			return err
		}
		out.Limited, l.UpdatedAt = true, l.UpdatedAt.UTC()
		if _, err := tx.Exec(ctx, s.sql("ModelTicketsExpire"), key); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, s.sql("ModelWindowUse"), key).Scan(&out.UsedTokens, &out.UsedRequests); err != nil {
			return err
		}
		var mine, keyLast *int64
		var head *uuid.UUID
		if err := tx.QueryRow(ctx, s.sql("ModelTicketTurn"), args(pgx.NamedArgs{"ticket": p.Ticket, "fairness_key": p.FairnessKey})).
			Scan(&mine, &head, &keyLast); err != nil {
			return err
		}
		first := head == nil || *head == p.Ticket
		if first && store.ModelFits(out.Limit, out.UsedTokens, out.UsedRequests, p.Tokens) {
			out.Admitted = true
			_, err := tx.Exec(ctx, s.sql("ModelAdmitInsert"), args(pgx.NamedArgs{
				"ticket": p.Ticket, "tokens": p.Tokens, "task_id": p.TaskID, "position": p.Position, "fairness_key": p.FairnessKey,
				"owner": p.Owner, "round": mine, "channel": s.modelChannel,
			}))
			return err
		}
		var round, last int64
		switch {
		case mine != nil:
			round = *mine
		case keyLast != nil:
			last = *keyLast
			fallthrough
		default:
			round = store.ModelTicketRound(served, last)
		}
		if _, err := tx.Exec(ctx, s.sql("ModelTicketPut"), args(pgx.NamedArgs{
			"ticket": p.Ticket, "fairness_key": p.FairnessKey, "round": round, "tokens": p.Tokens, "task_id": p.TaskID,
			"position": p.Position, "owner": p.Owner, "expires_at": now.Add(p.TicketTTL),
		})); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, s.sql("ModelTicketAhead"), args(pgx.NamedArgs{"ticket": p.Ticket})).Scan(&out.Ahead); err != nil {
			return err
		}
		if out.Ahead > 0 {
			return nil
		}
		var at time.Time
		err = tx.QueryRow(ctx, s.sql("ModelRetryAt"), args(pgx.NamedArgs{
			"tpm": l.TokensPerMinute, "rpm": l.RequestsPerMinute, "used": out.UsedTokens, "used_requests": out.UsedRequests, "ask": p.Tokens,
		})).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // it fits now: its next ask is admitted
		}
		out.RetryAt = at.UTC().Add(store.ModelLimitWindow)
		return err
	})
	if err != nil {
		return store.ModelAdmission{}, errors.Wrapf(interpretError(err), "admit a step of task %s under model limit %s", p.TaskID, p.Model)
	}
	return out, nil
}

// ModelSettle implements [store.Executor].
func (s *Store) ModelSettle(ctx context.Context, p *store.ModelSettleParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var n, notified int
	err := s.db.QueryRow(ctx, s.sql("ModelSettle"), pgx.NamedArgs{
		"id": p.Admission, "namespace": p.Namespace, "tokens": p.Tokens, "channel": s.modelChannel,
	}).Scan(&n, &notified)
	if err == nil && n == 0 {
		err = errors.Wrap(store.ErrNotFound, "not reserved")
	}
	return errors.Wrapf(interpretError(err), "settle model admission %s", p.Admission)
}

// ModelTicketDrop implements [store.Executor].
func (s *Store) ModelTicketDrop(ctx context.Context, p *store.ModelTicketDropParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRow(ctx, s.sql("ModelTicketDrop"), pgx.NamedArgs{
		"ticket": p.Ticket, "namespace": p.Namespace, "channel": s.modelChannel,
	}).Scan(&n)
	return errors.Wrapf(interpretError(err), "drop model ticket %s", p.Ticket)
}

// ModelAdmissionRemoveOld implements [store.Executor].
func (s *Store) ModelAdmissionRemoveOld(ctx context.Context, p *store.ModelAdmissionRemoveOldParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	before := s.now().Add(-p.Keep)
	args := pgx.NamedArgs{"before": before, "max": p.Max}
	tag, err := s.db.Exec(ctx, s.sql("ModelAdmissionRemoveOld"), args)
	if err != nil {
		return 0, errors.Wrap(interpretError(err), "remove model admissions")
	}
	if _, err := s.db.Exec(ctx, s.sql("ModelTicketRemoveOld"), args); err != nil {
		return 0, errors.Wrap(interpretError(err), "remove model tickets")
	}
	return int(tag.RowsAffected()), nil
}

// parseModelKey reads a model channel's payload: the namespace, a
// newline, the model.
func parseModelKey(payload string) []store.ModelKey {
	ns, model, ok := strings.Cut(payload, "\n")
	if !ok {
		return nil
	}
	return []store.ModelKey{{Namespace: ns, Model: model}}
}
