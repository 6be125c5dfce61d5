package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// StreamAppend implements [store.Store].
func (s *Store) StreamAppend(ctx context.Context, p *store.StreamAppendParams) (int64, error) {
	if err := plan.CheckStreamAppend(p); err != nil {
		return 0, err
	}
	var last int64
	err := s.tx(ctx, func(tx *txn) error {
		err := tx.queryRow(ctx, "StreamFence", p.TaskID.String(), p.Namespace, p.Epoch).Scan(&last)
		if errors.Is(err, sql.ErrNoRows) {
			return errmark.Mark(errors.Newf("append to the streams of task %s: it is not running under lease epoch %d", p.TaskID, p.Epoch), store.ErrFenced)
		}
		if err != nil {
			return err
		}
		now := us(s.now())
		for _, e := range p.Entries {
			last++
			if _, err := tx.exec(ctx, "StreamInsert", p.TaskID.String(), last, p.Namespace, e.Stream, e.Attempt, e.Position, string(e.Kind), e.Data, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, errors.Wrapf(interpret(err), "append to the streams of task %s", p.TaskID)
	}
	s.announce(store.Notification{Streams: []uuid.UUID{p.TaskID}})
	return last, nil
}

// StreamRead implements [store.Store].
func (s *Store) StreamRead(ctx context.Context, p *store.StreamReadParams) ([]store.StreamEntry, error) {
	limit, err := plan.StreamPage(p)
	if err != nil {
		return nil, err
	}
	var position, attempt int
	if p.Step != nil {
		position, attempt = p.Step.Position, p.Step.Attempt
	}
	rows, err := s.q.query(ctx, "StreamRead", p.TaskID.String(), p.Namespace, p.After, limit, p.Step != nil, position, attempt)
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "read the streams of task %s", p.TaskID)
	}
	defer rows.Close()
	var out []store.StreamEntry
	for rows.Next() {
		var e store.StreamEntry
		var kind string
		var created int64
		if err := rows.Scan(&e.Seq, &e.Stream, &e.Attempt, &e.Position, &kind, &e.Data, &created); err != nil {
			return nil, errors.Wrapf(interpret(err), "read the streams of task %s", p.TaskID)
		}
		e.Kind, e.CreatedAt = store.StreamKind(kind), fromUS(created)
		out = append(out, e)
	}
	return out, errors.Wrapf(interpret(rows.Err()), "read the streams of task %s", p.TaskID)
}

// StreamOpenList implements [store.Store].
func (s *Store) StreamOpenList(ctx context.Context, p *store.StreamOpenListParams) ([]store.StreamOpen, error) {
	if p.Namespace == "" {
		return nil, errors.New("list open streams: namespace is required")
	}
	rows, err := s.q.query(ctx, "StreamOpenList", p.TaskID.String(), p.Namespace, p.Before)
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "list the open streams of task %s", p.TaskID)
	}
	defer rows.Close()
	var out []store.StreamOpen
	for rows.Next() {
		var o store.StreamOpen
		if err := rows.Scan(&o.Stream, &o.Attempt, &o.Position); err != nil {
			return nil, errors.Wrapf(interpret(err), "list the open streams of task %s", p.TaskID)
		}
		out = append(out, o)
	}
	return out, errors.Wrapf(interpret(rows.Err()), "list the open streams of task %s", p.TaskID)
}

// StreamRemove implements [store.Store].
func (s *Store) StreamRemove(ctx context.Context, p *store.StreamRemoveParams) (int, error) {
	if p.Namespace == "" {
		return 0, errors.New("remove streams: namespace is required")
	}
	var n int64
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "StreamRemove", p.TaskID.String(), p.Namespace)
		if err == nil {
			n, _ = res.RowsAffected()
		}
		return err
	})
	return int(n), errors.Wrapf(interpret(err), "remove the streams of task %s", p.TaskID)
}

// StreamRemoveExpired implements [store.Store].
func (s *Store) StreamRemoveExpired(ctx context.Context, p *store.StreamRemoveExpiredParams) (int, error) {
	if p.Namespace == "" {
		return 0, errors.New("remove expired stream entries: namespace is required")
	}
	if p.Max <= 0 {
		return 0, nil
	}
	var n int64
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "StreamRemoveExpired", p.Namespace, us(p.Before), p.Max)
		if err == nil {
			n, _ = res.RowsAffected()
		}
		return err
	})
	return int(n), errors.Wrapf(interpret(err), "remove expired stream entries of namespace %s", p.Namespace)
}
