package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
)

// InquiryCreate implements [store.Executor].
func (s *Store) InquiryCreate(ctx context.Context, p *store.InquiryCreateParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	now := s.now()
	_, err := s.db.Exec(ctx, s.sql("InquiryCreate"), pgx.NamedArgs{
		"id": p.ID, "namespace": p.Namespace, "task_id": p.TaskID, "task_type": p.TaskType, "task_version": p.TaskVersion,
		"kind": p.Kind, "name": p.Name, "args": p.Args, "now": now, "deadline": now.Add(p.Timeout), "channel": s.inquiryChannel,
	})
	return errors.Wrapf(interpretError(err), "create inquiry %s", p.ID)
}

// InquiryTake implements [store.Executor].
func (s *Store) InquiryTake(ctx context.Context, p *store.InquiryTakeParams) ([]*store.Inquiry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	types, versions := make([]string, len(p.Types)), make([]int32, len(p.Types))
	for i, k := range p.Types {
		types[i], versions[i] = k.Type, int32(k.Version)
	}
	now := s.now()
	rows, err := s.db.Query(ctx, s.sql("InquiryTake"), pgx.NamedArgs{
		"namespace": p.Namespace, "types": types, "versions": versions, "kinds": p.TakeKinds(), "now": now,
		"max": p.Max, "owner": p.Owner, "until": now.Add(p.Lease),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "take inquiries")
	}
	out, err := pgx.CollectRows(rows, scanInquiry)
	return out, errors.Wrap(interpretError(err), "take inquiries")
}

// InquiryAnswer implements [store.Executor].
func (s *Store) InquiryAnswer(ctx context.Context, p *store.InquiryAnswerParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRow(ctx, s.sql("InquiryAnswer"), pgx.NamedArgs{
		"id": p.ID, "namespace": p.Namespace, "owner": p.Owner, "answer": p.Answer, "error_code": p.ErrorCode, "error": p.Error,
		"now": s.now(), "channel": s.answeredChannel,
	}).Scan(&n)
	if err == nil && n == 0 {
		err = errors.Wrap(store.ErrNotFound, "not pending")
	}
	return errors.Wrapf(interpretError(err), "answer inquiry %s", p.ID)
}

// InquiryGet implements [store.Executor].
func (s *Store) InquiryGet(ctx context.Context, p *store.InquiryGetParams) (*store.Inquiry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("InquiryGet"), pgx.NamedArgs{"id": p.ID, "namespace": p.Namespace})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "get inquiry %s", p.ID)
	}
	in, err := pgx.CollectExactlyOneRow(rows, scanInquiry)
	return in, errors.Wrapf(interpretError(err), "get inquiry %s", p.ID)
}

// InquiryRemoveExpired implements [store.Executor].
func (s *Store) InquiryRemoveExpired(ctx context.Context, p *store.InquiryRemoveExpiredParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	tag, err := s.db.Exec(ctx, s.sql("InquiryRemoveExpired"), pgx.NamedArgs{"before": s.now().Add(-p.Keep), "max": p.Max})
	if err != nil {
		return 0, errors.Wrap(interpretError(err), "remove inquiries")
	}
	return int(tag.RowsAffected()), nil
}

func scanInquiry(row pgx.CollectableRow) (*store.Inquiry, error) {
	var in store.Inquiry
	var takenUntil, answeredAt *time.Time
	err := row.Scan(&in.ID, &in.Namespace, &in.TaskID, &in.TaskType, &in.TaskVersion, &in.Kind, &in.Name, &in.Args, &in.State,
		&in.Answer, &in.ErrorCode, &in.Error, &in.TakenBy, &takenUntil, &in.AnsweredBy, &in.CreatedAt, &answeredAt, &in.Deadline)
	if takenUntil != nil {
		in.TakenUntil = takenUntil.UTC()
	}
	if answeredAt != nil {
		in.AnsweredAt = answeredAt.UTC()
	}
	in.CreatedAt, in.Deadline = in.CreatedAt.UTC(), in.Deadline.UTC()
	return &in, err
}
