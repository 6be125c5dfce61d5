package requests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// DispatchRemote writes remote steps a running task dispatched, over ex
// (a store or a transaction of one), in one transaction: the task's
// remote_step_dispatched events (EventAppend, fenced by its attempt's
// lease: p's payloads, their inputs encoded) and the steps' rows
// (RemoteStepInsert), which workers of the steps' queues then claim. A
// refused append (ErrFenced, ErrConflict, ...) writes nothing.
func DispatchRemote(ctx context.Context, ex store.Executor, namespace string, p *store.EventAppendParams) (history.State, error) {
	rows := make([]store.RemoteStep, 0, len(p.Payloads))
	for _, pl := range p.Payloads {
		d, ok := pl.(history.RemoteStepDispatchedData)
		if !ok {
			return p.State, errors.AssertionFailedf("dispatch remote steps of task %s: a %s among the dispatches", p.TaskID, pl.EventType())
		}
		rows = append(rows, store.RemoteStep{
			Namespace: namespace, TaskID: p.TaskID, Position: d.Position, Name: d.Name, Queue: d.Queue, Attempt: d.Attempt,
			Input: d.Input, HeartbeatTimeout: time.Duration(d.HeartbeatTimeoutMillis) * time.Millisecond,
			StartToClose: time.Duration(d.StartToCloseMillis) * time.Millisecond,
		})
	}
	tx, err := ex.Begin(ctx)
	if err != nil {
		return p.State, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	next, err := tx.EventAppend(ctx, p)
	if err != nil {
		return p.State, errors.Wrapf(err, "dispatch remote steps of task %s", p.TaskID)
	}
	if err := tx.RemoteStepInsert(ctx, &store.RemoteStepInsertParams{Steps: rows}); err != nil {
		return p.State, errors.Wrapf(err, "dispatch remote steps of task %s", p.TaskID)
	}
	if err := tx.Commit(ctx); err != nil {
		return p.State, err
	}
	return next, nil
}

// ErrClaimLost marks the outcome of a remote step under a claim that no
// longer holds it: its lease ended and the step went back to its queue
// (or failed), the task ended or was cancelled, or another claim's
// outcome was recorded. The outcome is not recorded.
var ErrClaimLost = errmark.Mark(errors.New("the claim no longer holds the remote step"), store.ErrFenced)

// RemoteOutcome is what a claim of a remote step reports: its output
// (encoded by the caller's payload stage) when Failure is nil.
type RemoteOutcome struct {
	Ref      store.RemoteStepRef
	Output   json.RawMessage
	Failure  *history.ErrorInfo
	Duration time.Duration
	// Decode decodes stream chunks as stored (the caller's payload stage,
	// in place), so that the outcome records the streams the claim wrote
	// as a Go step's stream_closed does: chunks, bytes and the digest of
	// their JSON. Without it (the rescuer's), or when a chunk does not
	// decode, they are closed unrecorded.
	Decode func(ctx context.Context, datas [][]byte) error
}

// SettleRemote records the outcome of a remote step reported under a
// claim, in one transaction: the claim's row is taken (RemoteStepTake)
// and the task's remote_step_completed or remote_step_failed appended,
// which wakes a task awaiting it. Reported again under the same claim,
// once recorded, it is not an error and records nothing (a worker that
// lost the answer asks again); reported under a claim that no longer
// holds the step it is an error marked [ErrClaimLost] (and
// store.ErrFenced). An outcome for a task that has finished is refused
// the same way, and its row removed. recorded says whether this call
// recorded the outcome (false: it was on record already).
func SettleRemote(ctx context.Context, s store.Store, o RemoteOutcome) (recorded bool, err error) {
	for try := 0; ; try++ {
		recorded, retry, err := settleRemote(ctx, s, o)
		if (retry || errors.Is(err, store.ErrRetryable)) && try+1 < maxSettleTries {
			// The task's history moved on: its attempt appended, or the
			// outcomes of its other remote steps (a fan-out answers at
			// once). Apart, and read again.
			if err := sleepCtx(ctx, time.Duration(rand.Int64N(int64(settleJitter)))); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, errors.Wrapf(err, "remote step %d of task %s", o.Ref.Position, o.Ref.TaskID)
		}
		return recorded, nil
	}
}

// maxSettleTries bounds the tries of an outcome that races other appends
// to its task, each apart by up to settleJitter: a fan-out of a hundred
// remote steps may answer within the same milliseconds.
const (
	maxSettleTries = 50
	settleJitter   = 10 * time.Millisecond
)

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// settleRemote is one try of SettleRemote; retry says the task's history
// moved on meanwhile (an append of its own attempt), or its streams (a
// writer took the seqs of the closing entries).
func settleRemote(ctx context.Context, s store.Store, o RemoteOutcome) (recorded, retry bool, err error) {
	tx, err := s.Begin(ctx)
	if err != nil {
		return false, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	row, err := tx.RemoteStepTake(ctx, &o.Ref)
	if errors.Is(err, store.ErrNotFound) {
		_ = tx.Rollback(ctx)
		return alreadySettled(ctx, s, o)
	}
	if err != nil {
		return false, false, err
	}
	state, err := settleStates.load(ctx, tx, o.Ref.Namespace, o.Ref.TaskID)
	if err != nil {
		return false, false, err
	}
	closing := store.RemoteStreamCloseParams{Namespace: o.Ref.Namespace, TaskID: o.Ref.TaskID, Position: row.Position, Kind: store.StreamEnd}
	if o.Failure != nil {
		closing.Kind = store.StreamRewind
	}
	if r, ok := state.RemoteAt(row.Position); !ok || !r.InFlight() || r.Attempt != row.Attempt || outcomeRefused(state) {
		// Nothing awaits the outcome: the row goes, its streams are
		// rewound, the outcome is refused. A cancelled task compensates
		// what is on record, so a step that ends after the cancel is not
		// taken in (its worker heard of the cancel at its heartbeat).
		closing.Kind = store.StreamRewind
		if err := closeStreamsIn(ctx, tx, &closing); err != nil {
			return false, false, err
		}
		if err := tx.Commit(ctx); err != nil {
			return false, false, err
		}
		return false, false, errors.Wrapf(ErrClaimLost, "the task is %s%s", state.Status, cancelNote(state))
	}
	streams, open, err := recordStreams(ctx, tx, o, row, closing.Kind)
	if err != nil {
		return false, false, err
	}
	outcome := outcomeEvent(o, row, streams)
	next, err := tx.EventAppend(ctx, &store.EventAppendParams{TaskID: o.Ref.TaskID, State: state, Payloads: []history.Payload{outcome}})
	if err == nil && open {
		err = closeStreamsIn(ctx, tx, &closing)
	}
	if errors.Is(err, store.ErrConflict) {
		settleStates.forget(o.Ref.Namespace, o.Ref.TaskID)
		return false, true, err
	}
	if err != nil {
		return false, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, false, err
	}
	settleStates.keep(o.Ref.Namespace, o.Ref.TaskID, next)
	return true, false, nil
}

// recordStreams reads what the claim of row wrote to the task's streams
// (its attempt's entries, after any rewind a release wrote) and returns
// the record of those still open, closed as kind, as the outcome carries
// it (none without o.Decode), and whether any is open. It runs after the
// claim's row was taken: no chunk of the claim can follow.
func recordStreams(ctx context.Context, tx store.Tx, o RemoteOutcome, row *store.RemoteStep, kind store.StreamKind) ([]history.StreamClosedData, bool, error) {
	outcome := history.StreamCompleted
	if kind == store.StreamRewind {
		outcome = history.StreamRewound
	}
	acc := newStreamTally(row.Position, outcome)
	recorded := o.Decode != nil
	for after := int64(0); ; {
		page, err := tx.StreamRead(ctx, &store.StreamReadParams{Namespace: o.Ref.Namespace, TaskID: o.Ref.TaskID, After: after,
			Step: &store.StreamStep{Position: row.Position, Attempt: row.Attempt}})
		if err != nil || len(page) == 0 {
			return acc.records(recorded), acc.anyOpen(), err
		}
		if recorded && decodeChunks(ctx, o.Decode, page) != nil {
			// A chunk that does not open here (its key is gone): the
			// streams close unrecorded rather than record ciphertext.
			recorded = false
		}
		for _, e := range page {
			acc.add(e)
		}
		after = page[len(page)-1].Seq
	}
}

func decodeChunks(ctx context.Context, decode func(context.Context, [][]byte) error, page []store.StreamEntry) error {
	var datas [][]byte
	var at []int
	for i, e := range page {
		if e.Kind == store.StreamChunk {
			datas, at = append(datas, e.Data), append(at, i)
		}
	}
	if len(datas) == 0 {
		return nil
	}
	if err := decode(ctx, datas); err != nil {
		return errors.Wrap(err, "decode the claim's stream chunks")
	}
	for j, i := range at {
		page[i].Data = datas[j]
	}
	return nil
}

// outcomeRefused reports whether the task in state takes no remote
// step's outcome: finished, cancelled, or compensating.
func outcomeRefused(state history.State) bool {
	return state.Status.Terminal() || state.CancelRequested || state.Compensation != nil
}

func cancelNote(state history.State) string {
	if !state.Status.Terminal() && (state.CancelRequested || state.Compensation != nil) {
		return ", its cancel or compensation under way"
	}
	return ""
}

// outcomeEvent is the event that records o for the step of row, with the
// record of the streams it closes.
func outcomeEvent(o RemoteOutcome, row *store.RemoteStep, streams []history.StreamClosedData) history.Payload {
	if o.Failure != nil {
		return history.RemoteStepFailedData{Position: row.Position, Name: row.Name, Attempt: row.Attempt, Worker: row.Worker,
			Claim: row.Nonce, Error: *o.Failure, DurationMillis: o.Duration.Milliseconds(), Streams: streams}
	}
	return history.RemoteStepCompletedData{Position: row.Position, Name: row.Name, Attempt: row.Attempt, Worker: row.Worker,
		Claim: row.Nonce, Output: o.Output, DurationMillis: o.Duration.Milliseconds(), Streams: streams}
}

// alreadySettled answers an outcome whose claim holds no row: the same
// outcome already recorded under the claim is not an error; anything else
// is a lost claim.
func alreadySettled(ctx context.Context, s store.Store, o RemoteOutcome) (recorded, retry bool, err error) {
	events, err := store.TaskEvents(ctx, s, o.Ref.Namespace, o.Ref.TaskID)
	if err != nil {
		return false, false, err
	}
	if len(events) == 0 {
		return false, false, errors.Wrap(ErrClaimLost, "no such task")
	}
	for _, e := range events {
		switch d := e.Data.(type) {
		case history.RemoteStepCompletedData:
			if d.Position == o.Ref.Position && d.Claim == o.Ref.Nonce && o.Failure == nil {
				return false, false, nil
			}
		case history.RemoteStepFailedData:
			if d.Position == o.Ref.Position && d.Claim == o.Ref.Nonce && o.Failure != nil && d.Error.Kind != KindRemoteLeaseExpired {
				return false, false, nil
			}
		}
	}
	return false, false, ErrClaimLost
}

// KindRemoteLeaseExpired is the error kind of a remote step's attempt
// whose claim's lease ended before it reported: its worker died, hung or
// lost the network. The workflow's retry policy decides what follows,
// as for any failure (by default: tried again).
const KindRemoteLeaseExpired = "heartbeat_timeout"

// ExpireRemote fails the attempts of remote steps whose claim's lease
// ended (up to max of them), as the rescuer does for tasks: each
// remote_step_failed of kind [KindRemoteLeaseExpired] wakes its task,
// whose retry policy decides. A claim that heartbeat meanwhile keeps its
// step. With sweep, it first removes the rows of tasks that finished,
// and rewinds what their claims left open in the tasks' streams. It
// returns how many attempts it failed.
func ExpireRemote(ctx context.Context, s store.Store, max int, sweep bool) (int, error) {
	if sweep {
		if err := sweepFinished(ctx, s, max); err != nil {
			return 0, err
		}
	}
	expired, err := s.RemoteStepListExpired(ctx, &store.RemoteStepExpiredParams{Max: max})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range expired {
		ref := store.RemoteStepRef{Namespace: r.Namespace, TaskID: r.TaskID, Position: r.Position, Nonce: r.Nonce, Expired: true}
		info := history.ErrorInfo{
			Message: fmt.Sprintf("worker %s held remote step %d (%s) past its lease of %s without a heartbeat", r.Worker, r.Position, r.Name, r.HeartbeatTimeout),
			Kind:    KindRemoteLeaseExpired,
		}
		_, err := SettleRemote(ctx, s, RemoteOutcome{Ref: ref, Failure: &info, Duration: r.LeaseExpiresAt.Sub(r.ClaimedAt)})
		if errors.Is(err, store.ErrFenced) {
			continue // it heartbeat, or reported, first
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// sweepFinished removes up to max rows of remote steps whose tasks have
// finished (nothing will take their outcomes) and rewinds their streams,
// so a reader does not wait on chunks no outcome will close.
func sweepFinished(ctx context.Context, s store.Store, max int) error {
	gone, err := s.RemoteStepRemoveFinished(ctx, &store.RemoteStepExpiredParams{Max: max})
	if err != nil {
		return err
	}
	for _, r := range gone {
		if err := closeStreamsIn(ctx, s, &store.RemoteStreamCloseParams{Namespace: r.Namespace, TaskID: r.TaskID,
			Position: r.Position, Kind: store.StreamRewind}); err != nil {
			return err
		}
	}
	return nil
}

// closeStreamsIn closes a remote step's streams (RemoteStreamClose) in a
// transaction of its own within ex (a savepoint, when ex is one), tried
// again when their closing entries lose their seqs to another writer of
// the task's streams: the failed statement is undone alone.
func closeStreamsIn(ctx context.Context, ex store.Executor, p *store.RemoteStreamCloseParams) error {
	for try := 1; ; try++ {
		sp, err := ex.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err = sp.RemoteStreamClose(ctx, p); err == nil {
			return sp.Commit(ctx)
		}
		_ = sp.Rollback(ctx)
		if !errors.Is(err, store.ErrConflict) || try == maxSettleTries {
			return err
		}
		if err := sleepCtx(ctx, time.Duration(rand.Int64N(int64(time.Millisecond)))); err != nil {
			return err
		}
	}
}
