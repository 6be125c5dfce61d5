package plan

import (
	"bytes"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/inputid"
)

// KeyHolder is what holds an idempotency key: a task, or a task that
// retention removed, whose key stays retired for a while (retired_keys) so
// that a late duplicate start is still one. A retired key keeps the
// removed task's type and the SHA-256 of its input's canonical form, not
// the input.
type KeyHolder struct {
	Type        string
	Input       []byte // a task's input (Removed false)
	InputDigest []byte // a removed task's InputDigest (Removed true)
	Removed     bool
	// ParentID and ParentPosition name the parent a task holding the key
	// was started by, as its child ("" for a task started on its own, or
	// removed).
	ParentID       string
	ParentPosition int
}

// ChildOf reports whether the holder is the child a child start sched
// (ParentID set) makes: the task its parent started at that position.
// A key held by anything else (a task someone started with the key, one
// retention removed) is never adopted as a parent's child: its parent
// would wait for a task that does not report to it.
func (h KeyHolder) ChildOf(sched history.TaskScheduledData) bool {
	return !h.Removed && h.ParentID == sched.ParentID && h.ParentPosition == sched.ParentPosition
}

// ChildKeyTaken is the error of a child start whose idempotency key is
// held by a task that is not the parent's child (see [KeyHolder.ChildOf]),
// marked store.ErrIdempotencyKeyReused.
func ChildKeyTaken(sched history.TaskScheduledData) error {
	return errmark.Mark(errors.Newf("child %d of task %s: its idempotency key %s is held by a task that is not this parent's child",
		sched.ParentPosition, sched.ParentID, sched.IdempotencyKey), store.ErrIdempotencyKeyReused)
}

// CheckHolder refuses the start sched of a key holder holds: a child
// start whose key is not its own child's ([ChildKeyTaken]), or a start
// refusing its key's reuse (refuseReuse) that is not the holder's own
// ([KeyReused]).
func CheckHolder(h KeyHolder, sched history.TaskScheduledData, refuseReuse bool) error {
	switch {
	case sched.ParentID != "" && !h.ChildOf(sched):
		return ChildKeyTaken(sched)
	case refuseReuse && !h.SameStart(sched):
		return KeyReused()
	}
	return nil
}

// SameStart reports whether sched is the start that made the holder, as
// [SameStart] compares them; for a removed task, by its input's digest.
func (h KeyHolder) SameStart(sched history.TaskScheduledData) bool {
	if !h.Removed {
		return SameStart(h.Type, h.Input, sched)
	}
	return h.Type == sched.TaskType && bytes.Equal(h.InputDigest, InputDigest(sched.Input))
}

// InputDigest is the SHA-256 of input's canonical JSON form (no input:
// null's), what a retired key keeps of its task's input: two inputs with
// the same digest are the same JSON value however each store wrote it
// back. Text that is not JSON is digested as it is.
func InputDigest(input []byte) []byte {
	if sealed, ok := history.ParseSealed(input); ok && len(sealed.Digest) > 0 {
		// An encrypted input is known by the keyed digest of its
		// plaintext (payload/seal), the same for every start of it.
		return sealed.Digest
	}
	return inputid.Digest(input)
}
