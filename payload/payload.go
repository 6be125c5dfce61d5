package payload

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// Kind says which of a task's payloads a [Payload] is: codecs treat some
// kinds differently (a step's output kept by reference is the event's
// OutputRef; a schedule's input belongs to no task).
type Kind uint8

const (
	// Input is a task's input: task_scheduled's, and its row's.
	Input Kind = iota + 1
	// StepOutput is a step's output (step_completed). Kept by reference,
	// it is the event's OutputRef: [Payload.Ref].
	StepOutput
	// Output is a workflow's output (task_completed, and the row's), or a
	// remote step's (remote_step_completed); a parent's child_finished
	// holds a copy, owned by the child.
	Output
	// Signal is a signal's payload (signal_received), or a remote step's
	// input (remote_step_dispatched).
	Signal
	// ScheduleInput is a schedule's input, which every task the schedule
	// starts takes as its own: no one task owns it.
	ScheduleInput
	// BlobData is the bytes of a blob a task owns (activities.PutBlob, or a
	// payload kept by reference): any bytes, not JSON.
	BlobData
	// StreamChunk is a chunk of a task's stream (activities.Stream), JSON,
	// kept beside its history: sealed with the task's data key, never
	// kept by reference.
	StreamChunk
	// Inquiry is the arguments, or the answer, of an inquiry about a task
	// (a query): JSON the task owns for as long as the inquiry lives,
	// sealed with its key, never kept by reference.
	Inquiry
)

// Payload is one payload on its way to a store ([Stage.Encode]) or back
// ([Stage.Decode]), with what a codec needs to know of it. Codecs change
// it in place.
type Payload struct {
	// Namespace is the namespace of the payload's task.
	Namespace string
	// Task is the task that owns the payload: whose data key seals it,
	// whose blobs it may be kept in. uuid.Nil: no one task (a schedule's
	// input; a signal sent by idempotency key, its task not known yet).
	Task uuid.UUID
	Kind Kind
	// Data is the payload: JSON, or a blob's bytes.
	Data []byte
	// Ref is a step's output kept by reference ([StepOutput] only), Data
	// then empty: what step_completed records as its OutputRef.
	Ref *history.BlobRef
	// BlobKey is a blob's key ([BlobData] only).
	BlobKey string
	// Start, on a new task's input encoded for its start, gathers what
	// codecs write with the task, in its transaction.
	Start *Start
	// Archived, on a payload read from an archive, is what the archive
	// kept beside the task's events: codecs read a task's state there
	// (its data key), not in the store, which no longer has the task.
	Archived *Archived
	// KeepRefs, on a decode, leaves payloads kept by reference as their
	// references: what a reader that links to them wants (the HTTP API).
	KeepRefs bool
	// Err, after a decode, is why a codec could not decode the payload,
	// which it then left as it was: its blob is gone, damaged or
	// unreadable. A payload a codec cannot open here (encrypted, without
	// the key) is left as it is without an error: readers show it
	// sealed.
	Err error

	stage *Stage // the stage the payload passes through: PutBlob and GetBlob use it
}

// Start is what a new task's start writes with it, in its own
// transaction, that codecs add while they encode its input.
type Start struct {
	// Keyed reports that the start has an idempotency key: an encrypted
	// input then carries a keyed digest of its plaintext, which the
	// key's reuse is compared by.
	Keyed bool
	// DataKey is the task's data key, wrapped, made by a codec that
	// encrypts.
	DataKey []byte
	// Blobs are the task's blobs written with it (an input kept by
	// reference), ready for the store: their bytes encoded, and put in a
	// bucket already when the blob store keeps them there.
	Blobs []*Blob
}

// Archived is what an archive keeps beside a task's events.
type Archived struct {
	// Task is the archived task: the payloads of its record are its own,
	// or (a child's output in child_finished) another task's.
	Task uuid.UUID
	// DataKey is Task's wrapped data key; nil for a task that had none,
	// or was erased.
	DataKey []byte
}

// Codec encodes payloads on their way to a store and decodes them on
// their way back; it is Temporal's PayloadCodec, with each payload's
// context. A [Stage] chains codecs.
//
// Encode changes each payload of ps it has something to do for, in
// place; an error fails the batch. Decode changes each payload it can
// decode, in place; one it cannot decode it leaves as it is, with
// [Payload.Err] set when that is an error the reader should see; its
// error fails the batch (the store could not be read). A codec passes on
// a payload it does not recognise as its own, so decoding a decoded
// payload changes nothing. Both are called from the goroutine of the
// read or write, with ps owned by the stage for the call; a codec is
// safe for concurrent use.
type Codec interface {
	Encode(ctx context.Context, ps []*Payload) error
	Decode(ctx context.Context, ps []*Payload) error
}

// PutBlob keeps data as a blob of p's task and returns its reference:
// through the stage p passes through (the blob's bytes encoded by its
// codecs, in its blob store), written now, or for a start with the task
// ([Start.Blobs]). For a codec that keeps payloads by reference.
func (p *Payload) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	if p.stage == nil {
		return history.BlobRef{}, errors.AssertionFailedf("payload: PutBlob on a payload outside a stage")
	}
	if p.Task == uuid.Nil {
		return history.BlobRef{}, errors.AssertionFailedf("payload: a blob needs a task to own it")
	}
	return p.stage.putBlob(ctx, p.Namespace, p.Task, p.Start, contentType, data)
}

// GetBlob reads the blob ref names, a blob of p's task, decoded and
// checked against ref: see [Stage.GetBlob]. For a codec that keeps
// payloads by reference.
func (p *Payload) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	if p.stage == nil {
		return nil, errors.AssertionFailedf("payload: GetBlob on a payload outside a stage")
	}
	return p.stage.GetBlob(ctx, p.Namespace, ref, p.Task)
}

// Errors a stage's reads and writes are marked with.
var (
	// ErrSealed marks a payload, or a blob, that stays encrypted: its
	// task was erased, or this process has no key for it.
	ErrSealed = errors.New("payload is encrypted")
	// ErrCorrupt marks an encrypted payload, or blob, that does not open
	// with its key: it was altered, or sealed for another task.
	ErrCorrupt = errors.New("encrypted payload is damaged")
	// ErrBlobCorrupt marks a blob whose stored bytes do not match the
	// size and SHA-256 digest its reference records: the data is
	// damaged, and is never handed out.
	ErrBlobCorrupt = errors.New("blob does not match its reference")
	// ErrTooLarge marks a payload over its limit; the error says the size
	// and the limit.
	ErrTooLarge = errors.New("payload too large")
	// ErrNotFound marks a blob that does not exist in the namespace, or is
	// not one of the task a reference was resolved for. A [Blobs]
	// marks its own misses with it.
	ErrNotFound = errors.New("blob not found")
)

// MaxBlobBytes is the most bytes one blob holds (256 MiB): a blob over it
// is refused with [ErrTooLarge], nothing written.
const MaxBlobBytes = 256 << 20
