package edge

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/payload"
)

// ClaimRemote claims remote steps (store.RemoteStepClaim) with their
// inputs decoded: one that does not open here (no key) stays as stored.
func (e *Store) ClaimRemote(ctx context.Context, p *store.RemoteStepClaimParams) ([]*store.RemoteStep, error) {
	steps, err := e.st.RemoteStepClaim(ctx, p)
	if err != nil || len(steps) == 0 {
		return steps, err
	}
	ps := make([]*payload.Payload, len(steps))
	for i, r := range steps {
		ps[i] = &payload.Payload{Namespace: r.Namespace, Task: r.TaskID, Kind: payload.Signal, Data: r.Input}
	}
	if err := e.Decode(ctx, ps); err != nil {
		// Not handed out: back to the queue at once, rather than held
		// until their leases end and failed.
		for _, r := range steps {
			_ = e.st.RemoteStepRelease(context.WithoutCancel(ctx), &store.RemoteStepRef{Namespace: r.Namespace, TaskID: r.TaskID,
				Position: r.Position, Nonce: r.Nonce})
		}
		return nil, errors.Wrap(err, "claim remote steps: decode their inputs")
	}
	for i, p := range ps {
		if p.Err == nil {
			steps[i].Input = p.Data
		}
	}
	return steps, nil
}

// SettleRemote records a remote step's outcome (engine.SettleRemote),
// its output encoded for its task as a workflow's output is (sealed, or
// kept as a blob over the threshold: a blob not recorded, because the
// same outcome was on record already, is removed), and the record of its
// streams taken from their chunks, decoded.
func (e *Store) SettleRemote(ctx context.Context, o engine.RemoteOutcome) error {
	o.Decode = func(ctx context.Context, datas [][]byte) error { return e.decodeChunks(ctx, o.Ref, datas) }
	if o.Failure != nil || len(o.Output) == 0 {
		_, err := engine.SettleRemote(ctx, e.st, o)
		return err
	}
	enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: o.Ref.Namespace, Task: o.Ref.TaskID, Kind: payload.Output, Data: o.Output}})
	if err != nil {
		return errors.Wrapf(err, "remote step %d of task %s: encode the output", o.Ref.Position, o.Ref.TaskID)
	}
	o.Output = enc.At(0).Data
	recorded, err := engine.SettleRemote(ctx, e.st, o)
	e.stage.Discard(ctx, enc, func(int) bool { return err == nil && recorded })
	return err
}

// decodeChunks decodes a remote step's stream chunks as stored, in
// place; a chunk that does not open here (no key) is an error.
func (e *Store) decodeChunks(ctx context.Context, ref store.RemoteStepRef, datas [][]byte) error {
	ps := make([]*payload.Payload, len(datas))
	for i, d := range datas {
		ps[i] = &payload.Payload{Namespace: ref.Namespace, Task: ref.TaskID, Kind: payload.StreamChunk, Data: d}
	}
	if err := e.stage.Decode(ctx, ps); err != nil {
		return err
	}
	for i, p := range ps {
		if p.Err != nil {
			return p.Err
		}
		datas[i] = p.Data
	}
	return nil
}

// StreamRemote writes chunks (JSON) to the task's streams under a remote
// step's claim (store.RemoteStreamAppend), each encoded by the stage
// first, as a Go step's are: sealed in an encrypted namespace. bytes is
// the chunks' JSON size, counted against the claim's bound. It returns the
// seq of the last chunk written.
func (e *Store) StreamRemote(ctx context.Context, ref store.RemoteStepRef, chunks []store.RemoteChunk, bytes int64) (int64, error) {
	ps := make([]*payload.Payload, len(chunks))
	for i, c := range chunks {
		ps[i] = &payload.Payload{Namespace: ref.Namespace, Task: ref.TaskID, Kind: payload.StreamChunk, Data: c.Data}
	}
	enc, err := e.stage.Encode(ctx, ps)
	if err != nil {
		return 0, err
	}
	stored := make([]store.RemoteChunk, len(chunks))
	for i, c := range chunks {
		stored[i] = store.RemoteChunk{Stream: c.Stream, Data: enc.At(i).Data}
	}
	return e.st.RemoteStreamAppend(ctx, &store.RemoteStreamAppendParams{Ref: ref, Chunks: stored, Bytes: bytes})
}
