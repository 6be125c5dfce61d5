package executor

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// stepBlobs is a step's activity.BlobStore: the task's blobs, with
// errors that name the step.
type stepBlobs struct {
	edge.TaskBlobs
	step     string
	position int
}

func (b stepBlobs) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	ref, err := b.TaskBlobs.PutBlob(ctx, contentType, data)
	return ref, errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID())
}

// GetBlob reads a blob; a damaged one fails the step permanently (kind
// blob_corrupt): reading it again gives the same wrong bytes.
func (b stepBlobs) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	data, err := b.TaskBlobs.GetBlob(ctx, ref)
	if err == nil {
		return data, nil
	}
	err = errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID())
	if errors.Is(err, payload.ErrBlobCorrupt) {
		err = activities.WithKind(activities.Permanent(err), KindBlobCorrupt)
	}
	return nil, err
}

// KindBlobCorrupt is the error kind of a step that read a damaged blob.
const KindBlobCorrupt = "blob_corrupt"

// encodeStep encodes a step's completion for its append: its output over
// the blob threshold kept in the task's blobs (the history records the
// reference), sealed when the namespace is encrypted.
func (h *Handler) encodeStep(a *edge.Attempt, p history.Payload) (edge.Events, error) {
	ev, err := a.Encode(a.DurableContext(), p)
	if err != nil {
		if step, ok := p.(history.StepCompletedData); ok {
			return edge.Events{}, errors.Wrapf(err, "record the output of step %d (%s)", step.Position, step.Name)
		}
		return edge.Events{}, errors.Wrapf(err, "record %s", p.EventType())
	}
	return ev, nil
}

// encodeOutput encodes the task_completed of a workflow's output: one
// over the blob threshold kept in the task's blobs, task_completed
// recording {"cairn_blob": ref} in its place (history.BlobEnvelope),
// which readers resolve. One over MaxBlobBytes fails as an output over
// the limit does.
func (h *Handler) encodeOutput(a *edge.Attempt, out []byte) (edge.Events, error) {
	ev, err := a.Encode(a.DurableContext(), history.TaskCompletedData{Output: out})
	if errors.Is(err, payload.ErrTooLarge) {
		return edge.Events{}, payloadTooLarge("the workflow's output", len(out), payload.MaxBlobBytes)
	}
	return ev, errors.Wrap(err, "keep the workflow's output")
}

// childrenView is the attempt's children as the workflow reads them
// (their outputs decoded, those kept by reference read back), kept while
// the attempt's state stays at one sequence number: StartChild asks for
// them on every call, and resolving them each time made a fan-out of n
// children cost O(n²) per attempt. Its mutex is for safety's sake: the
// interpreter reads children under its own lock already.
type childrenView struct {
	mu    sync.Mutex
	seq   int64 // LastSeq of the state children was resolved from
	valid bool
	kids  []history.Child
}

// get returns the children of a's state now, decoded.
func (v *childrenView) get(ctx context.Context, a *edge.Attempt) []history.Child {
	v.mu.Lock()
	defer v.mu.Unlock()
	state := a.State()
	if v.valid && v.seq == state.LastSeq {
		return v.kids
	}
	// A state's sequence number names its history: the attempt's state
	// moves only by appends, each of which raises it.
	v.kids, v.seq, v.valid = a.Children(ctx, state.Children), state.LastSeq, true
	return v.kids
}

// resolveOutputs returns state with the outputs of its steps decoded
// (those its history keeps by reference read back from the task's
// blobs), so the workflow replays over the outputs themselves: those of
// Steps and of the steps on record ahead of them (Ahead).
func resolveOutputs(ctx context.Context, a *edge.Attempt, state history.State) (history.State, error) {
	var err error
	if state.Steps, err = a.Steps(ctx, state.Steps); err != nil {
		return state, err
	}
	state.Ahead, err = a.Steps(ctx, state.Ahead)
	return state, err
}

// unreadableOutput ends an attempt whose recorded step outputs cannot be
// read back: a damaged or missing blob fails the task for good (reading
// again gives the same bytes); anything else (the database out of reach)
// ends the attempt for a retry.
func (h *Handler) unreadableOutput(ctx context.Context, a *edge.Attempt, typ Type, state history.State, err error) (edge.Events, error) {
	if !errors.Is(err, payload.ErrBlobCorrupt) && !errors.Is(err, store.ErrNotFound) {
		return edge.Events{}, err
	}
	info := history.ErrorInfo{Class: history.Permanent, Kind: KindBlobCorrupt, ClassifiedBy: "rule:" + KindBlobCorrupt, Message: err.Error()}
	return a.Encode(ctx, h.giveUp(typ, state, info, "a payload kept by reference cannot be read")...)
}
