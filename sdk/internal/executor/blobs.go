package executor

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// stepBlobs is a step's activity.BlobStore: the task's blobs, with
// errors that name the step.
type stepBlobs struct {
	engine.TaskBlobs
	step     string
	position int
}

func (b stepBlobs) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	ref, err := b.TaskBlobs.PutBlob(ctx, contentType, data)
	return ref, errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID)
}

// GetBlob reads a blob; a damaged one fails the step permanently (kind
// blob_corrupt): reading it again gives the same wrong bytes.
func (b stepBlobs) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	data, err := b.TaskBlobs.GetBlob(ctx, ref)
	if err == nil {
		return data, nil
	}
	err = errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID)
	if errors.Is(err, engine.ErrBlobCorrupt) {
		err = activities.WithKind(activities.Permanent(err), KindBlobCorrupt)
	}
	return nil, err
}

// KindBlobCorrupt is the error kind of a step that read a damaged blob.
const KindBlobCorrupt = "blob_corrupt"

// offload moves a step's output over the blob threshold into the task's
// blobs: the history records the reference instead of the bytes.
func (h *Handler) offload(a *engine.Attempt, p history.Payload) (history.Payload, error) {
	step, ok := p.(history.StepCompletedData)
	if !ok || h.blobThreshold <= 0 || len(step.Output) <= h.blobThreshold {
		return p, nil
	}
	ref, err := a.Blobs().PutBlob(a.DurableContext(), "application/json", step.Output)
	if err != nil {
		return nil, errors.Wrapf(err, "keep the output of step %d (%s) as a blob", step.Position, step.Name)
	}
	step.Output, step.OutputRef = nil, &ref
	return step, nil
}

// offloadOutput keeps a workflow's output over the blob threshold in the
// task's blobs: task_completed records {"cairn_blob": ref} in its place
// (history.BlobEnvelope), which readers resolve. One over MaxBlobBytes
// fails as an output over the limit does.
func (h *Handler) offloadOutput(a *engine.Attempt, out json.RawMessage) (json.RawMessage, error) {
	if h.blobThreshold <= 0 || len(out) <= h.blobThreshold {
		return out, nil
	}
	ref, err := a.Blobs().PutBlob(a.DurableContext(), "application/json", out)
	if errors.Is(err, engine.ErrPayloadTooLarge) {
		return nil, payloadTooLarge("the workflow's output", len(out), engine.MaxBlobBytes)
	}
	if err != nil {
		return nil, errors.Wrap(err, "keep the workflow's output as a blob")
	}
	return history.BlobEnvelope(ref), nil
}

// resolvedSignals returns signals with the payloads kept by reference (a
// sender's over its client's threshold) read back, each blob once per
// attempt (cache).
func resolvedSignals(ctx context.Context, a *engine.Attempt, signals []history.Signal, cache map[string]json.RawMessage) []history.Signal {
	var out []history.Signal
	for i, sig := range signals {
		data, ok := readReferenced(ctx, a, sig.Payload, a.Task.ID, cache) // kept as a blob of the task
		if !ok {
			continue
		}
		if out == nil {
			out = append([]history.Signal(nil), signals...)
		}
		out[i].Payload = data
	}
	if out == nil {
		return signals
	}
	return out
}

// readReferenced reads back raw when it is a reference ({"cairn_blob":
// …}) to a blob of task owner, through cache; ok is false when it is not
// one, or its blob cannot be read (the reference is left for the decode to
// refuse). A reference to a blob of another task than owner is not read
// (engine.GetTaskBlob): cairn never writes one.
func readReferenced(ctx context.Context, a *engine.Attempt, raw json.RawMessage, owner uuid.UUID, cache map[string]json.RawMessage) (json.RawMessage, bool) {
	ref, ok := history.ParseBlobEnvelope(raw)
	if !ok {
		return nil, false
	}
	key := owner.String() + "/" + ref.Key
	if data, seen := cache[key]; seen {
		return data, true
	}
	data, err := a.Blobs().GetBlobOf(ctx, ref, owner)
	if err != nil {
		return nil, false
	}
	cache[key] = data
	return data, true
}

// resolvedChildren returns children with the outputs kept by reference
// (a child's output over its worker's threshold) read back, each blob once
// per attempt (cache).
func resolvedChildren(ctx context.Context, a *engine.Attempt, children []history.Child, cache map[string]json.RawMessage) []history.Child {
	var out []history.Child
	for i, c := range children {
		owner, err := uuid.Parse(c.ID)
		if err != nil {
			continue
		}
		data, ok := readReferenced(ctx, a, c.Output, owner, cache) // kept as a blob of the child
		if !ok {
			continue
		}
		if out == nil {
			out = append([]history.Child(nil), children...)
		}
		out[i].Output = data
	}
	if out == nil {
		return children
	}
	return out
}

// childrenView is the attempt's children as the workflow reads them
// (resolvedChildren), kept while the attempt's state stays at one
// sequence number: StartChild asks for them on every call, and resolving
// them each time made a fan-out of n children cost O(n²) per attempt.
// Its mutex is for safety's sake: the interpreter reads children under
// its own lock already.
type childrenView struct {
	mu    sync.Mutex
	seq   int64 // LastSeq of the state children was resolved from
	valid bool
	kids  []history.Child
	cache map[string]json.RawMessage // the attempt's blobs read, shared with the signals
}

// get returns the children of a's state now, resolved.
func (v *childrenView) get(ctx context.Context, a *engine.Attempt) []history.Child {
	v.mu.Lock()
	defer v.mu.Unlock()
	state := a.State()
	if v.valid && v.seq == state.LastSeq {
		return v.kids
	}
	// A state's sequence number names its history: the attempt's state
	// moves only by appends, each of which raises it.
	v.kids, v.seq, v.valid = resolvedChildren(ctx, a, state.Children, v.cache), state.LastSeq, true
	return v.kids
}

// resolveInput is the task's input, read back (checked) when the client
// kept it as a blob ({"cairn_blob": …}).
func resolveInput(ctx context.Context, a *engine.Attempt) (json.RawMessage, error) {
	ref, ok := history.ParseBlobEnvelope(a.Task.Input)
	if !ok {
		return a.Task.Input, nil
	}
	data, err := a.Blobs().GetOwnBlob(ctx, ref)
	return data, errors.Wrap(err, "read the task's input")
}

// resolveOutputs returns state with the outputs its history keeps by
// reference read back from the task's blobs (a copy of the steps, when any
// is), so the workflow replays over the outputs themselves: those of Steps
// and of the steps on record ahead of them (Ahead).
func resolveOutputs(ctx context.Context, a *engine.Attempt, state history.State) (history.State, error) {
	var err error
	if state.Steps, err = resolveStepOutputs(ctx, a, state.Steps); err != nil {
		return state, err
	}
	state.Ahead, err = resolveStepOutputs(ctx, a, state.Ahead)
	return state, err
}

// resolveStepOutputs returns steps with their outputs kept by reference
// read back (a copy, when any is).
func resolveStepOutputs(ctx context.Context, a *engine.Attempt, in []history.Step) ([]history.Step, error) {
	var steps []history.Step
	for i, s := range in {
		if s.OutputRef == nil {
			continue
		}
		if steps == nil {
			steps = append([]history.Step(nil), in...)
		}
		out, err := a.Blobs().GetOwnBlob(ctx, *s.OutputRef)
		if err != nil {
			return in, errors.Wrapf(err, "read the output of step %d (%s)", s.Position, s.Name)
		}
		steps[i].Output = out
	}
	if steps != nil {
		return steps, nil
	}
	return in, nil
}

// unreadableOutput ends an attempt whose recorded step outputs cannot be
// read back: a damaged or missing blob fails the task for good (reading
// again gives the same bytes); anything else (the database out of reach)
// ends the attempt for a retry.
func (h *Handler) unreadableOutput(typ Type, state history.State, err error) ([]history.Payload, error) {
	if !errors.Is(err, engine.ErrBlobCorrupt) && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	info := history.ErrorInfo{Class: history.Permanent, Kind: KindBlobCorrupt, ClassifiedBy: "rule:" + KindBlobCorrupt, Message: err.Error()}
	return h.giveUp(typ, state, info, "a payload kept by reference cannot be read"), nil
}
