package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
)

// InquiryCreate implements [store.Executor].
func (s *Store) InquiryCreate(ctx context.Context, p *store.InquiryCreateParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	now := s.now()
	err := s.tx(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "InquiryCreate", p.ID.String(), p.Namespace, p.TaskID.String(), p.TaskType, p.TaskVersion,
			p.Kind, p.Name, blobOrNull(p.Args), us(now), us(now.Add(p.Timeout)))
		return interpret(err)
	})
	if err != nil {
		return errors.Wrapf(err, "create inquiry %s", p.ID)
	}
	s.announce(store.Notification{Inquiries: true})
	return nil
}

// InquiryTake implements [store.Executor].
func (s *Store) InquiryTake(ctx context.Context, p *store.InquiryTakeParams) ([]*store.Inquiry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	kinds, err := json.Marshal(p.TakeKinds())
	if err != nil {
		return nil, errors.Wrap(err, "take inquiries")
	}
	types := make([][2]any, len(p.Types))
	for i, k := range p.Types {
		types[i] = [2]any{k.Type, k.Version}
	}
	typesJSON, err := json.Marshal(types)
	if err != nil {
		return nil, errors.Wrap(err, "take inquiries")
	}
	now := s.now()
	var out []*store.Inquiry
	err = s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "InquiryTake", p.Namespace, string(kinds), string(typesJSON), us(now), p.Max, p.Owner, us(now.Add(p.Lease)))
		if err != nil {
			return interpret(err)
		}
		out, err = scanInquiries(rows)
		return err
	})
	if err != nil {
		return nil, errors.Wrap(err, "take inquiries")
	}
	// RETURNING's order is not the subquery's.
	slices.SortFunc(out, func(a, b *store.Inquiry) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return slices.Compare(a.ID[:], b.ID[:])
	})
	return out, nil
}

// InquiryAnswer implements [store.Executor].
func (s *Store) InquiryAnswer(ctx context.Context, p *store.InquiryAnswerParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "InquiryAnswer", p.ID.String(), p.Namespace, blobOrNull(p.Answer), p.ErrorCode, p.Error, p.Owner, us(s.now()))
		if err != nil {
			return interpret(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Wrap(errors.CombineErrors(store.ErrNotFound, err), "not pending")
		}
		return nil
	})
	if err != nil {
		return errors.Wrapf(err, "answer inquiry %s", p.ID)
	}
	s.announce(store.Notification{Answered: []uuid.UUID{p.ID}})
	return nil
}

// InquiryGet implements [store.Executor].
func (s *Store) InquiryGet(ctx context.Context, p *store.InquiryGetParams) (*store.Inquiry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "InquiryGet", p.ID.String(), p.Namespace)
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "get inquiry %s", p.ID)
	}
	out, err := scanInquiries(rows)
	if err == nil && len(out) == 0 {
		err = errors.WithStack(store.ErrNotFound)
	}
	if err != nil {
		return nil, errors.Wrapf(err, "get inquiry %s", p.ID)
	}
	return out[0], nil
}

// InquiryRemoveExpired implements [store.Executor].
func (s *Store) InquiryRemoveExpired(ctx context.Context, p *store.InquiryRemoveExpiredParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var n int64
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "InquiryRemoveExpired", us(s.now().Add(-p.Keep)), p.Max)
		if err != nil {
			return interpret(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, errors.Wrap(err, "remove inquiries")
	}
	return int(n), nil
}

// scanInquiries reads rows of inquiries and closes them.
func scanInquiries(rows *sql.Rows) ([]*store.Inquiry, error) {
	defer rows.Close()
	var out []*store.Inquiry
	for rows.Next() {
		var in store.Inquiry
		var id, task string
		var takenUntil, answeredAt sql.NullInt64
		var created, deadline int64
		if err := rows.Scan(&id, &in.Namespace, &task, &in.TaskType, &in.TaskVersion, &in.Kind, &in.Name, &in.Args, &in.State,
			&in.Answer, &in.ErrorCode, &in.Error, &in.TakenBy, &takenUntil, &in.AnsweredBy, &created, &answeredAt, &deadline); err != nil {
			return nil, interpret(err)
		}
		var err error
		if in.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		if in.TaskID, err = uuid.Parse(task); err != nil {
			return nil, err
		}
		in.CreatedAt, in.Deadline = fromUS(created), fromUS(deadline)
		if takenUntil.Valid {
			in.TakenUntil = fromUS(takenUntil.Int64)
		}
		if answeredAt.Valid {
			in.AnsweredAt = fromUS(answeredAt.Int64)
		}
		out = append(out, &in)
	}
	return out, interpret(rows.Err())
}

// blobOrNull is b as a BLOB, NULL when it is nil (as pgx writes a nil
// []byte).
func blobOrNull(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
