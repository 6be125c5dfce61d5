package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// RemoteStepInsert implements [store.Executor].
func (s *Store) RemoteStepInsert(ctx context.Context, p *store.RemoteStepInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	now := us(s.now())
	queues := map[string]bool{}
	err := s.tx(ctx, func(tx *txn) error {
		for _, r := range p.Steps {
			_, err := tx.exec(ctx, "RemoteStepInsert", r.TaskID.String(), r.Position, r.Namespace, r.Name, r.Queue, r.Attempt,
				blobOrNull(r.Input), r.HeartbeatTimeout.Milliseconds(), r.StartToClose.Milliseconds(), now)
			if err != nil {
				return interpret(err)
			}
			queues[store.RemoteQueueKey(r.Namespace, r.Queue)] = true
		}
		return nil
	})
	if err != nil {
		return errors.Wrap(err, "insert remote steps")
	}
	s.announceRemote(queues)
	return nil
}

// announceRemote announces the queues (namespace/queue) where steps
// became claimable.
func (s *Store) announceRemote(queues map[string]bool) {
	var a store.Notification
	for q := range queues {
		a.Remote = append(a.Remote, q)
	}
	s.announce(a)
}

// RemoteStepClaim implements [store.Executor].
func (s *Store) RemoteStepClaim(ctx context.Context, p *store.RemoteStepClaimParams) ([]*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	names := p.Names
	if names == nil {
		names = []string{}
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return nil, errors.Wrap(err, "claim remote steps")
	}
	var out []*store.RemoteStep
	err = s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "RemoteStepClaim", p.Namespace, p.Queue, string(namesJSON), p.Max, p.Worker, us(s.now()))
		if err != nil {
			return interpret(err)
		}
		out, err = scanRemoteSteps(rows)
		return err
	})
	if err != nil {
		return nil, errors.Wrap(err, "claim remote steps")
	}
	store.SortRemoteSteps(out)
	return out, nil
}

// RemoteStepHeartbeat implements [store.Executor].
func (s *Store) RemoteStepHeartbeat(ctx context.Context, p *store.RemoteStepRef) (store.RemoteRenewal, error) {
	if err := p.Validate(); err != nil {
		return store.RemoteRenewal{}, err
	}
	var r store.RemoteRenewal
	err := s.tx(ctx, func(tx *txn) error {
		var end int64
		err := tx.queryRow(ctx, "RemoteStepHeartbeat", p.TaskID.String(), p.Position, p.Namespace, p.Nonce, us(s.now()), queuesJSON(p.Queues)).
			Scan(&end, &r.CancelRequested)
		r.LeaseExpiresAt = fromUS(end)
		return interpret(err)
	})
	if errors.Is(err, store.ErrNotFound) {
		err = errors.Wrap(err, "the claim does not hold the step")
	}
	return r, errors.Wrapf(err, "heartbeat remote step %d of task %s", p.Position, p.TaskID)
}

// RemoteStepTake implements [store.Executor].
func (s *Store) RemoteStepTake(ctx context.Context, p *store.RemoteStepRef) (*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []*store.RemoteStep
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "RemoteStepTake", p.TaskID.String(), p.Position, p.Namespace, p.Nonce, us(s.now()), p.Expired, queuesJSON(p.Queues))
		if err != nil {
			return interpret(err)
		}
		out, err = scanRemoteSteps(rows)
		if err == nil && len(out) == 0 {
			err = errors.Wrap(store.ErrNotFound, "the claim does not hold the step")
		}
		return err
	})
	if err != nil {
		return nil, errors.Wrapf(err, "take remote step %d of task %s", p.Position, p.TaskID)
	}
	return out[0], nil
}

// RemoteStepRelease implements [store.Executor].
func (s *Store) RemoteStepRelease(ctx context.Context, p *store.RemoteStepRef) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var queue string
	err := s.tx(ctx, func(tx *txn) error {
		return interpret(tx.queryRow(ctx, "RemoteStepRelease", p.TaskID.String(), p.Position, p.Namespace, p.Nonce, queuesJSON(p.Queues)).Scan(&queue))
	})
	if errors.Is(err, store.ErrNotFound) {
		err = errors.Wrap(err, "the claim does not hold the step")
	}
	if err != nil {
		return errors.Wrapf(err, "release remote step %d of task %s", p.Position, p.TaskID)
	}
	s.announceRemote(map[string]bool{store.RemoteQueueKey(p.Namespace, queue): true})
	return nil
}

// RemoteStepListExpired implements [store.Executor].
func (s *Store) RemoteStepListExpired(ctx context.Context, p *store.RemoteStepExpiredParams) ([]*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.q.query(ctx, "RemoteStepListExpired", us(s.now()), p.Max)
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list expired remote steps")
	}
	out, err := scanRemoteSteps(rows)
	return out, errors.Wrap(err, "list expired remote steps")
}

// RemoteStepRemoveFinished implements [store.Executor].
func (s *Store) RemoteStepRemoveFinished(ctx context.Context, p *store.RemoteStepExpiredParams) ([]*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []*store.RemoteStep
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "RemoteStepRemoveFinished", p.Max)
		if err != nil {
			return interpret(err)
		}
		out, err = scanRemoteSteps(rows)
		return err
	})
	return out, errors.Wrap(err, "remove finished remote steps")
}

// queuesJSON is a reference's queues as a JSON array ([] for any).
func queuesJSON(queues []string) string {
	if len(queues) == 0 {
		return "[]"
	}
	b, err := json.Marshal(queues)
	if err != nil {
		return "[]"
	}
	return string(b)
}

// scanRemoteSteps reads rows of remote steps and closes them.
func scanRemoteSteps(rows *sql.Rows) ([]*store.RemoteStep, error) {
	defer rows.Close()
	var out []*store.RemoteStep
	for rows.Next() {
		var r store.RemoteStep
		var task string
		var heartbeat, startToClose, dispatched int64
		var claimed, leaseEnd sql.NullInt64
		if err := rows.Scan(&r.Namespace, &task, &r.Position, &r.Name, &r.Queue, &r.Attempt, &r.Input, &heartbeat, &startToClose,
			&dispatched, &r.Nonce, &r.Worker, &claimed, &leaseEnd, &r.CancelRequested); err != nil {
			return nil, interpret(err)
		}
		var err error
		if r.TaskID, err = uuid.Parse(task); err != nil {
			return nil, err
		}
		r.HeartbeatTimeout, r.StartToClose = time.Duration(heartbeat)*time.Millisecond, time.Duration(startToClose)*time.Millisecond
		r.DispatchedAt = fromUS(dispatched)
		if claimed.Valid {
			r.ClaimedAt = fromUS(claimed.Int64)
		}
		if leaseEnd.Valid {
			r.LeaseExpiresAt = fromUS(leaseEnd.Int64)
		}
		out = append(out, &r)
	}
	return out, interpret(rows.Err())
}

// RemoteStreamAppend implements [store.Executor].
func (s *Store) RemoteStreamAppend(ctx context.Context, p *store.RemoteStreamAppendParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	r := &p.Ref
	names := make([]string, len(p.Chunks))
	for i, c := range p.Chunks {
		names[i] = c.Stream
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return 0, errors.Wrap(err, "append to a remote step's streams")
	}
	var last int64
	err = s.tx(ctx, func(tx *txn) error {
		var attempt, position int
		err := tx.queryRow(ctx, "RemoteStreamHold", r.TaskID.String(), r.Position, r.Namespace, r.Nonce, queuesJSON(r.Queues),
			p.Bytes, store.MaxRemoteStreamBytes, string(namesJSON), history.MaxStreams).Scan(&attempt, &position)
		if errors.Is(err, sql.ErrNoRows) {
			var full int
			if err := tx.queryRow(ctx, "RemoteStreamFull", r.TaskID.String(), r.Position, r.Namespace, r.Nonce, p.Bytes,
				store.MaxRemoteStreamBytes, string(namesJSON), history.MaxStreams).Scan(&full); err != nil {
				return interpret(err)
			}
			if full > 0 {
				return errors.Wrapf(store.ErrStreamFull, "%d bytes more, or their streams, would pass the claim's limits of %d bytes and %d streams",
					p.Bytes, store.MaxRemoteStreamBytes, history.MaxStreams)
			}
			return errors.Wrap(store.ErrNotFound, "the claim does not hold the step, or its task has finished")
		}
		if err != nil {
			return interpret(err)
		}
		if err := tx.queryRow(ctx, "RemoteStreamLastSeq", r.TaskID.String()).Scan(&last); err != nil {
			return interpret(err)
		}
		now := us(s.now())
		for _, c := range p.Chunks {
			last++
			if _, err := tx.exec(ctx, "StreamInsert", r.TaskID.String(), last, r.Namespace, c.Stream, attempt, position, string(store.StreamChunk), c.Data, now); err != nil {
				return interpret(err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, errors.Wrapf(err, "append to the streams of remote step %d of task %s", r.Position, r.TaskID)
	}
	s.announce(store.Notification{Streams: []uuid.UUID{r.TaskID}})
	return last, nil
}

// RemoteStreamClose implements [store.Executor].
func (s *Store) RemoteStreamClose(ctx context.Context, p *store.RemoteStreamCloseParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	type open struct {
		stream  string
		attempt int
	}
	var opens []open
	err := s.tx(ctx, func(tx *txn) error {
		rows, err := tx.query(ctx, "RemoteStreamOpen", p.TaskID.String(), p.Namespace, p.Position)
		if err != nil {
			return interpret(err)
		}
		defer rows.Close()
		for rows.Next() {
			var o open
			if err := rows.Scan(&o.stream, &o.attempt); err != nil {
				return interpret(err)
			}
			opens = append(opens, o)
		}
		if err := rows.Err(); err != nil || len(opens) == 0 {
			return interpret(err)
		}
		var last int64
		if err := tx.queryRow(ctx, "RemoteStreamLastSeq", p.TaskID.String()).Scan(&last); err != nil {
			return interpret(err)
		}
		now := us(s.now())
		for _, o := range opens {
			last++
			if _, err := tx.exec(ctx, "StreamInsert", p.TaskID.String(), last, p.Namespace, o.stream, o.attempt, p.Position, string(p.Kind), nil, now); err != nil {
				return interpret(err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, errors.Wrapf(err, "close the streams of remote step %d of task %s", p.Position, p.TaskID)
	}
	if len(opens) > 0 {
		s.announce(store.Notification{Streams: []uuid.UUID{p.TaskID}})
	}
	return len(opens), nil
}
