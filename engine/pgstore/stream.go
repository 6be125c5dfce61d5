package pgstore

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// StreamAppend implements [store.Store].
func (s *Store) StreamAppend(ctx context.Context, p *store.StreamAppendParams) (int64, error) {
	if err := plan.CheckStreamAppend(p); err != nil {
		return 0, err
	}
	n := len(p.Entries)
	streams, attempts, positions := make([]string, n), make([]int32, n), make([]int32, n)
	kinds, datas := make([]string, n), make([][]byte, n)
	for i, e := range p.Entries {
		streams[i], attempts[i], positions[i], kinds[i], datas[i] = e.Stream, int32(e.Attempt), int32(e.Position), string(e.Kind), e.Data
	}
	var last *int64
	args := pgx.NamedArgs{
		"task_id": p.TaskID, "namespace": p.Namespace, "epoch": p.Epoch, "now": s.now(), "channel": s.streamChannel,
		"streams": streams, "attempts": attempts, "positions": positions, "kinds": kinds, "datas": datas,
	}
	err := s.retryTakenSeq(ctx, func() error { return s.db.QueryRow(ctx, s.sql("StreamAppend"), args).Scan(&last) })
	if err != nil {
		return 0, errors.Wrapf(interpretError(err), "append to the streams of task %s", p.TaskID)
	}
	if last == nil {
		return 0, errmark.Mark(errors.Newf("append to the streams of task %s: it is not running under lease epoch %d", p.TaskID, p.Epoch), store.ErrFenced)
	}
	return *last, nil
}

// StreamRead implements [store.Store].
func (s *Store) StreamRead(ctx context.Context, p *store.StreamReadParams) ([]store.StreamEntry, error) {
	limit, err := plan.StreamPage(p)
	if err != nil {
		return nil, err
	}
	args := pgx.NamedArgs{"task_id": p.TaskID, "namespace": p.Namespace, "after": p.After, "max": limit, "by_step": p.Step != nil,
		"position": 0, "attempt": 0}
	if p.Step != nil {
		args["position"], args["attempt"] = p.Step.Position, p.Step.Attempt
	}
	rows, err := s.db.Query(ctx, s.sql("StreamRead"), args)
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "read the streams of task %s", p.TaskID)
	}
	var out []store.StreamEntry
	var e store.StreamEntry
	var kind string
	var attempt, position int32
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&e.Seq, &e.Stream, &attempt, &position, &kind, &e.Data, &at}, func() error {
		e.Attempt, e.Position, e.Kind, e.CreatedAt = int(attempt), int(position), store.StreamKind(kind), at.UTC()
		out = append(out, e)
		e.Data = nil
		return nil
	})
	return out, errors.Wrapf(interpretError(err), "read the streams of task %s", p.TaskID)
}

// StreamOpenList implements [store.Store].
func (s *Store) StreamOpenList(ctx context.Context, p *store.StreamOpenListParams) ([]store.StreamOpen, error) {
	if p.Namespace == "" {
		return nil, errors.New("list open streams: namespace is required")
	}
	rows, err := s.db.Query(ctx, s.sql("StreamOpenList"), pgx.NamedArgs{"task_id": p.TaskID, "namespace": p.Namespace, "before": p.Before})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "list the open streams of task %s", p.TaskID)
	}
	var out []store.StreamOpen
	var o store.StreamOpen
	var attempt, position int32
	_, err = pgx.ForEachRow(rows, []any{&o.Stream, &attempt, &position}, func() error {
		o.Attempt, o.Position = int(attempt), int(position)
		out = append(out, o)
		return nil
	})
	return out, errors.Wrapf(interpretError(err), "list the open streams of task %s", p.TaskID)
}

// StreamRemove implements [store.Store].
func (s *Store) StreamRemove(ctx context.Context, p *store.StreamRemoveParams) (int, error) {
	if p.Namespace == "" {
		return 0, errors.New("remove streams: namespace is required")
	}
	tag, err := s.db.Exec(ctx, s.sql("StreamRemove"), pgx.NamedArgs{"task_id": p.TaskID, "namespace": p.Namespace})
	if err != nil {
		return 0, errors.Wrapf(interpretError(err), "remove the streams of task %s", p.TaskID)
	}
	return int(tag.RowsAffected()), nil
}

// StreamRemoveExpired implements [store.Store].
func (s *Store) StreamRemoveExpired(ctx context.Context, p *store.StreamRemoveExpiredParams) (int, error) {
	if p.Namespace == "" {
		return 0, errors.New("remove expired stream entries: namespace is required")
	}
	if p.Max <= 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, s.sql("StreamRemoveExpired"), pgx.NamedArgs{"namespace": p.Namespace, "before": p.Before.UTC(), "max": p.Max})
	if err != nil {
		return 0, errors.Wrapf(interpretError(err), "remove expired stream entries of namespace %s", p.Namespace)
	}
	return int(tag.RowsAffected()), nil
}

// maxSeqTries bounds the tries of a stream append that lost its seqs to
// another writer of the same task; each waits up to a millisecond per
// try lost before the next, so that writers in a tight race spread out.
const maxSeqTries = 50

// retryTakenSeq runs an append of stream entries until it does not lose
// its seqs to another writer: a task's streams are written by its
// attempt and by the claims of its remote steps at once, each numbering
// its entries after the last it sees. The loser fails on the primary key
// (its statement wrote nothing) and numbers again. Not in a store bound
// to a transaction: there the failure ends the transaction, and the
// conflict is its caller's to retry.
func (s *Store) retryTakenSeq(ctx context.Context, write func() error) error {
	for try := 1; ; try++ {
		err := write()
		if try == maxSeqTries || s.txn != nil || !errors.Is(interpretError(err), store.ErrConflict) {
			return err
		}
		t := time.NewTimer(time.Duration(rand.Int64N(int64(min(try, 10)) * int64(time.Millisecond))))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
