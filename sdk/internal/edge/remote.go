package edge

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
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
// kept as a blob over the threshold).
func (e *Store) SettleRemote(ctx context.Context, o engine.RemoteOutcome) (history.State, error) {
	if o.Failure == nil && len(o.Output) > 0 {
		enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: o.Ref.Namespace, Task: o.Ref.TaskID, Kind: payload.Output, Data: o.Output}})
		if err != nil {
			return history.State{}, errors.Wrapf(err, "remote step %d of task %s: encode the output", o.Ref.Position, o.Ref.TaskID)
		}
		o.Output = enc.At(0).Data
		state, err := engine.SettleRemote(ctx, e.st, o)
		e.stage.Discard(ctx, enc, func(int) bool { return err == nil })
		return state, err
	}
	return engine.SettleRemote(ctx, e.st, o)
}
