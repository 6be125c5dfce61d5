package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// RemoteStepInsert implements [store.Executor].
func (s *Store) RemoteStepInsert(ctx context.Context, p *store.RemoteStepInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	n := len(p.Steps)
	args := pgx.NamedArgs{"now": s.now(), "channel": s.remoteChannel}
	taskIDs, positions, namespaces, names, queues := make([]string, n), make([]int32, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, inputs, heartbeats, startToCloses := make([]int32, n), make([][]byte, n), make([]int64, n), make([]int64, n)
	for i, r := range p.Steps {
		taskIDs[i], positions[i], namespaces[i], names[i], queues[i] = r.TaskID.String(), int32(r.Position), r.Namespace, r.Name, r.Queue
		attempts[i], inputs[i] = int32(r.Attempt), r.Input
		heartbeats[i], startToCloses[i] = r.HeartbeatTimeout.Milliseconds(), r.StartToClose.Milliseconds()
	}
	args["task_ids"], args["positions"], args["namespaces"], args["names"], args["queues"] = taskIDs, positions, namespaces, names, queues
	args["attempts"], args["inputs"], args["heartbeats"], args["start_to_closes"] = attempts, inputs, heartbeats, startToCloses
	_, err := s.db.Exec(ctx, s.sql("RemoteStepInsert"), args)
	return errors.Wrap(interpretError(err), "insert remote steps")
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
	rows, err := s.db.Query(ctx, s.sql("RemoteStepClaim"), pgx.NamedArgs{
		"namespace": p.Namespace, "queue": p.Queue, "names": names, "max": p.Max, "worker": p.Worker, "now": s.now(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "claim remote steps")
	}
	out, err := pgx.CollectRows(rows, scanRemoteStep)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "claim remote steps")
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
	err := s.db.QueryRow(ctx, s.sql("RemoteStepHeartbeat"), remoteRefArgs(p, s.now())).Scan(&r.LeaseExpiresAt, &r.CancelRequested)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errors.Wrap(store.ErrNotFound, "the claim does not hold the step")
	}
	r.LeaseExpiresAt = r.LeaseExpiresAt.UTC()
	return r, errors.Wrapf(interpretError(err), "heartbeat remote step %d of task %s", p.Position, p.TaskID)
}

// RemoteStepTake implements [store.Executor].
func (s *Store) RemoteStepTake(ctx context.Context, p *store.RemoteStepRef) (*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("RemoteStepTake"), remoteRefArgs(p, s.now()))
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "take remote step %d of task %s", p.Position, p.TaskID)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRemoteStep)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errors.Wrap(store.ErrNotFound, "the claim does not hold the step")
	}
	return r, errors.Wrapf(interpretError(err), "take remote step %d of task %s", p.Position, p.TaskID)
}

// RemoteStepRelease implements [store.Executor].
func (s *Store) RemoteStepRelease(ctx context.Context, p *store.RemoteStepRef) error {
	if err := p.Validate(); err != nil {
		return err
	}
	args := remoteRefArgs(p, s.now())
	args["channel"] = s.remoteChannel
	var n int
	err := s.db.QueryRow(ctx, s.sql("RemoteStepRelease"), args).Scan(&n)
	if err == nil && n == 0 {
		err = errors.Wrap(store.ErrNotFound, "the claim does not hold the step")
	}
	return errors.Wrapf(interpretError(err), "release remote step %d of task %s", p.Position, p.TaskID)
}

// RemoteStepListExpired implements [store.Executor].
func (s *Store) RemoteStepListExpired(ctx context.Context, p *store.RemoteStepExpiredParams) ([]*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("RemoteStepListExpired"), pgx.NamedArgs{"now": s.now(), "max": p.Max})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list expired remote steps")
	}
	out, err := pgx.CollectRows(rows, scanRemoteStep)
	return out, errors.Wrap(interpretError(err), "list expired remote steps")
}

// RemoteStepRemoveFinished implements [store.Executor].
func (s *Store) RemoteStepRemoveFinished(ctx context.Context, p *store.RemoteStepExpiredParams) ([]*store.RemoteStep, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("RemoteStepRemoveFinished"), pgx.NamedArgs{"max": p.Max})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "remove finished remote steps")
	}
	out, err := pgx.CollectRows(rows, scanRemoteStep)
	return out, errors.Wrap(interpretError(err), "remove finished remote steps")
}

func remoteRefArgs(p *store.RemoteStepRef, now time.Time) pgx.NamedArgs {
	queues := p.Queues
	if queues == nil {
		queues = []string{}
	}
	return pgx.NamedArgs{"task_id": p.TaskID, "position": p.Position, "namespace": p.Namespace, "nonce": p.Nonce,
		"expired": p.Expired, "now": now, "queues": queues}
}

func scanRemoteStep(row pgx.CollectableRow) (*store.RemoteStep, error) {
	var r store.RemoteStep
	var heartbeat, startToClose int64
	var claimedAt, leaseEnd *time.Time
	err := row.Scan(&r.Namespace, &r.TaskID, &r.Position, &r.Name, &r.Queue, &r.Attempt, &r.Input, &heartbeat, &startToClose,
		&r.DispatchedAt, &r.Nonce, &r.Worker, &claimedAt, &leaseEnd, &r.CancelRequested)
	r.HeartbeatTimeout, r.StartToClose = time.Duration(heartbeat)*time.Millisecond, time.Duration(startToClose)*time.Millisecond
	r.DispatchedAt = r.DispatchedAt.UTC()
	if claimedAt != nil {
		r.ClaimedAt = claimedAt.UTC()
	}
	if leaseEnd != nil {
		r.LeaseExpiresAt = leaseEnd.UTC()
	}
	return &r, err
}

// RemoteStreamAppend implements [store.Executor].
func (s *Store) RemoteStreamAppend(ctx context.Context, p *store.RemoteStreamAppendParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	args := remoteRefArgs(&p.Ref, s.now())
	streams, datas := make([]string, len(p.Chunks)), make([][]byte, len(p.Chunks))
	for i, c := range p.Chunks {
		streams[i], datas[i] = c.Stream, c.Data
	}
	args["streams"], args["datas"], args["bytes"] = streams, datas, p.Bytes
	args["max_bytes"], args["max_streams"] = int64(store.MaxRemoteStreamBytes), history.MaxStreams
	args["channel"] = s.streamChannel
	var last int64
	err := s.retryTakenSeq(ctx, func() error { return s.db.QueryRow(ctx, s.sql("RemoteStreamAppend"), args).Scan(&last) })
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing written: the claim is full, or it does not hold the
		// step (asked apart: the append's snapshot may predate the row's
		// last update).
		var full bool
		err = s.db.QueryRow(ctx, s.sql("RemoteStreamFull"), args).Scan(&full)
		if err == nil && full {
			return 0, errors.Wrapf(store.ErrStreamFull, "remote step %d of task %s: %d bytes more, or their streams, would pass the claim's limits of %d bytes and %d streams",
				p.Ref.Position, p.Ref.TaskID, p.Bytes, store.MaxRemoteStreamBytes, history.MaxStreams)
		}
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			err = errors.Wrap(store.ErrNotFound, "the claim does not hold the step, or its task has finished")
		}
	}
	return last, errors.Wrapf(interpretError(err), "append to the streams of remote step %d of task %s", p.Ref.Position, p.Ref.TaskID)
}

// RemoteStreamClose implements [store.Executor].
func (s *Store) RemoteStreamClose(ctx context.Context, p *store.RemoteStreamCloseParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var n int
	err := s.db.QueryRow(ctx, s.sql("RemoteStreamClose"), pgx.NamedArgs{"task_id": p.TaskID, "namespace": p.Namespace,
		"position": p.Position, "kind": string(p.Kind), "now": s.now(), "channel": s.streamChannel}).Scan(&n)
	return n, errors.Wrapf(interpretError(err), "close the streams of remote step %d of task %s", p.Position, p.TaskID)
}
