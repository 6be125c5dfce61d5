package edge

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload"
)

// Start writes the tasks ps start, their inputs encoded: in one statement
// for one task, in one transaction for many (see store.Store's
// TaskStart and TaskStartMany). Each start gets its id here, which the
// stage keeps its blobs and data key under. What encoding readied for a
// start that made no task (its key was taken, or the batch failed) is
// undone.
func (e *Store) Start(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	enc, err := e.encodeStarts(ctx, ps)
	if err != nil {
		return nil, err
	}
	qs := startParams(ps, enc)
	var res []store.TaskStartResult
	if len(qs) == 1 {
		var one store.TaskStartResult
		if one, err = e.st.TaskStart(ctx, qs[0]); err == nil {
			res = []store.TaskStartResult{one}
		}
	} else {
		res, err = e.st.TaskStartMany(ctx, qs)
	}
	e.stage.Discard(ctx, enc, func(i int) bool { return err == nil && !res[i].Existing })
	return res, err
}

// StartTx is [Store.Start] of one task inside the caller's transaction
// (pgstore's WithTx): on another store than PostgreSQL's it fails
// with an error marked [store.ErrUnsupported].
func (e *Store) StartTx(ctx context.Context, tx pgx.Tx, p *store.TaskStartParams) (store.TaskStartResult, error) {
	pg, ok := e.st.(*pgstore.Store)
	if !ok {
		return store.TaskStartResult{}, errmark.Mark(errors.Newf("a pgx transaction needs the PostgreSQL store, not %T", e.st), store.ErrUnsupported)
	}
	enc, err := e.encodeStarts(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return pg.WithTx(tx).TaskStart(ctx, startParams([]*store.TaskStartParams{p}, enc)[0])
}

// encodeStarts encodes the inputs of ps, each a new task's.
func (e *Store) encodeStarts(ctx context.Context, ps []*store.TaskStartParams) (payload.Encoded, error) {
	batch := make([]*payload.Payload, len(ps))
	for i, p := range ps {
		id := p.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return payload.Encoded{}, errors.Wrap(err, "new task id")
			}
		}
		batch[i] = &payload.Payload{Namespace: p.Namespace, Task: id, Kind: payload.Input, Data: p.Scheduled.Input,
			Start: &payload.Start{Keyed: p.Scheduled.IdempotencyKey != ""}}
	}
	return e.stage.Encode(ctx, batch)
}

// startParams returns ps with what enc holds of them in place: their ids,
// inputs, data keys and blobs. It is where a start takes its payload.
func startParams(ps []*store.TaskStartParams, enc payload.Encoded) []*store.TaskStartParams {
	out := make([]*store.TaskStartParams, len(ps))
	for i, p := range ps {
		pl := enc.At(i)
		q := *p
		q.ID, q.Scheduled.Input, q.DataKey, q.Blobs = pl.Task, pl.Data, pl.Start.DataKey, storeBlobs(pl.Start.Blobs)
		out[i] = &q
	}
	return out
}

// Signal writes the signal p describes, its payload encoded (kept as a
// blob of the task when it is over the threshold and sent by id).
func (e *Store) Signal(ctx context.Context, p *store.TaskSignalParams) (store.SignalResult, error) {
	enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: p.Namespace, Task: p.TaskID, Kind: payload.Signal, Data: p.Payload}})
	if err != nil {
		return store.SignalResult{}, errors.Wrapf(err, "signal %q: encode the payload", p.Name)
	}
	q := *p
	q.Payload = enc.At(0).Data
	return engine.SignalTask(ctx, e.st, &q)
}

// AcceptUpdate writes the accepted update p describes, its args encoded
// as a signal's payload is ([engine.AcceptUpdate]).
func (e *Store) AcceptUpdate(ctx context.Context, p *engine.UpdateParams) (engine.UpdateResult, error) {
	enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: p.Namespace, Task: p.TaskID, Kind: payload.Signal, Data: p.Accepted.Args}})
	if err != nil {
		return engine.UpdateResult{}, errors.Wrapf(err, "update %q: encode the args", p.Accepted.Name)
	}
	q := *p
	q.Accepted.Args = enc.At(0).Data
	return engine.AcceptUpdate(ctx, e.st, &q)
}

// Schedule writes a schedule, its input encoded: it belongs to no
// task, so it is sealed with the namespace's key and stays in place.
func (e *Store) Schedule(ctx context.Context, p *store.ScheduleCreateParams) error {
	enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: p.Namespace, Kind: payload.ScheduleInput, Data: p.Input}})
	if err != nil {
		return errors.Wrapf(err, "schedule %s: encode the input", p.Name)
	}
	q := *p
	q.Input = enc.At(0).Data
	return e.st.ScheduleCreate(ctx, &q)
}

// ForkRequest is a fork as the SDK asks for it, its payloads in clear:
// the fork's start (its Scheduled.ForkedFrom set) and its copied steps,
// their outputs decoded from the original's (or replaced).
type ForkRequest struct {
	Namespace   string
	Original    uuid.UUID
	OriginalSeq int64
	Position    int
	By          string
	Start       *store.TaskStartParams
	Copies      []history.StepCompletedData
	Patches     []history.PatchRecordedData // no payload: passed on as they are
	Reset       *engine.ForkReset           // a reset's request on the original
}

// Fork writes the fork p asks for (engine.ForkTask, one transaction), its
// input and copied outputs encoded for the fork's own task: sealed with
// its data key, an input over the threshold kept as its blob. What
// encoding readied is undone when no fork was written.
func (e *Store) Fork(ctx context.Context, p *ForkRequest) (engine.ForkResult, error) {
	enc, err := e.encodeStarts(ctx, []*store.TaskStartParams{p.Start})
	if err != nil {
		return engine.ForkResult{}, err
	}
	q := startParams([]*store.TaskStartParams{p.Start}, enc)[0]
	// The outputs are the new task's, sealed with the data key its start
	// made (or, without an input, the first of them makes).
	steps := &payload.Start{DataKey: q.DataKey}
	ps := make([]*payload.Payload, len(p.Copies))
	for i, c := range p.Copies {
		ps[i] = &payload.Payload{Namespace: p.Namespace, Task: q.ID, Kind: payload.StepOutput, Data: c.Output, Start: steps}
	}
	encSteps, err := e.stage.Encode(ctx, ps)
	if err != nil {
		e.stage.Discard(ctx, enc, func(int) bool { return false })
		return engine.ForkResult{}, errors.Wrap(err, "fork: encode the copied outputs")
	}
	copies := make([]history.StepCompletedData, len(p.Copies))
	for i, c := range p.Copies {
		pl := encSteps.At(i)
		c.Output, c.OutputRef = pl.Data, pl.Ref
		copies[i] = c
	}
	if q.DataKey == nil {
		q.DataKey = steps.DataKey
	}
	q.Blobs = append(q.Blobs, storeBlobs(steps.Blobs)...)
	res, err := engine.ForkTask(ctx, e.st, &engine.ForkParams{
		Namespace: p.Namespace, Original: p.Original, OriginalSeq: p.OriginalSeq, Position: p.Position, By: p.By,
		Start: q, Copies: copies, Patches: p.Patches, Reset: p.Reset,
	})
	written := func(int) bool { return err == nil && !res.Existing }
	e.stage.Discard(ctx, enc, written)
	e.stage.Discard(ctx, encSteps, written)
	return res, err
}
