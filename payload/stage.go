package payload

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Stage is a chain of codecs over a blob store: what every payload passes
// through between a store and its users. It is safe for concurrent use.
type Stage struct {
	codecs []Codec
	blobs  Blobs
}

// NewStage returns the stage of codecs, in their encoding order, keeping
// blobs in blobs. With no codec, payloads pass as they are.
func NewStage(blobs Blobs, codecs ...Codec) *Stage {
	return &Stage{codecs: codecs, blobs: blobs}
}

// Encoded is payloads a [Stage] encoded: what a store may be given. Only
// [Stage.Encode] makes one, so a write that takes an Encoded cannot be
// handed a payload that did not pass through the stage.
type Encoded struct{ ps []Payload }

// Len is the number of payloads.
func (e Encoded) Len() int { return len(e.ps) }

// At returns the i-th payload, encoded, in the order given to Encode.
func (e Encoded) At(i int) Payload { return e.ps[i] }

// Encode encodes ps, each codec in turn in the order given, and returns
// them encoded. On an error, the blobs readied for starts are discarded.
// ps are changed in place; the caller keeps only the Encoded.
func (s *Stage) Encode(ctx context.Context, ps []*Payload) (Encoded, error) {
	for _, p := range ps {
		p.stage, p.Err = s, nil
	}
	for _, c := range s.codecs {
		if err := c.Encode(ctx, ps); err != nil {
			s.discard(ctx, ps)
			return Encoded{}, err
		}
	}
	out := make([]Payload, len(ps))
	for i, p := range ps {
		out[i] = *p
		out[i].stage = nil
	}
	return Encoded{ps: out}, nil
}

// Discard undoes what encoding the starts of e readied (blobs put in a
// bucket) for starts that were not written: a start that failed, or
// found its idempotency key taken.
func (s *Stage) Discard(ctx context.Context, e Encoded, written func(i int) bool) {
	for i, p := range e.ps {
		if p.Start != nil && len(p.Start.Blobs) > 0 && !written(i) {
			s.blobs.BlobDiscard(ctx, p.Start.Blobs)
		}
	}
}

func (s *Stage) discard(ctx context.Context, ps []*Payload) {
	for _, p := range ps {
		if p.Start != nil && len(p.Start.Blobs) > 0 {
			s.blobs.BlobDiscard(ctx, p.Start.Blobs)
			p.Start.Blobs = nil
		}
	}
}

// Decode decodes ps in place, the codecs in the reverse of their
// encoding order. A payload a codec could not decode keeps its
// [Payload.Err], and the codecs after it pass it by. The error is a
// codec's failure to read what the batch needs (the store).
func (s *Stage) Decode(ctx context.Context, ps []*Payload) error {
	for _, p := range ps {
		p.stage, p.Err = s, nil
	}
	for i := len(s.codecs) - 1; i >= 0; i-- {
		live := ps
		if failed(ps) {
			live = make([]*Payload, 0, len(ps))
			for _, p := range ps {
				if p.Err == nil {
					live = append(live, p)
				}
			}
		}
		if err := s.codecs[i].Decode(ctx, live); err != nil {
			return err
		}
	}
	return nil
}

// failed reports whether a payload of ps has an error.
func failed(ps []*Payload) bool {
	for _, p := range ps {
		if p.Err != nil {
			return true
		}
	}
	return false
}

// putBlob makes data a blob of task, its bytes encoded by the stage's
// codecs, and writes it: now, or with start when the blob belongs to a
// task being started.
func (s *Stage) putBlob(ctx context.Context, namespace string, task uuid.UUID, start *Start, contentType string, data []byte) (history.BlobRef, error) {
	ref, b, err := NewBlob(namespace, task, contentType, data)
	if err != nil {
		return history.BlobRef{}, err
	}
	bp := &Payload{Namespace: namespace, Task: task, Kind: BlobData, Data: data, BlobKey: b.Key, Start: start, stage: s}
	for _, c := range s.codecs {
		if err := c.Encode(ctx, []*Payload{bp}); err != nil {
			return history.BlobRef{}, err
		}
	}
	b.Data = bp.Data
	if start == nil {
		return ref, s.blobs.BlobPut(ctx, b)
	}
	row, err := s.blobs.BlobPrepare(ctx, b)
	if err != nil {
		return history.BlobRef{}, err
	}
	start.Blobs = append(start.Blobs, row)
	return ref, nil
}

// PutBlob keeps data as a blob of task id of namespace, its bytes
// encoded, and returns its reference: what a step's activities.PutBlob
// does. Over [MaxBlobBytes] it is refused with [ErrTooLarge].
func (s *Stage) PutBlob(ctx context.Context, namespace string, id uuid.UUID, contentType string, data []byte) (history.BlobRef, error) {
	return s.putBlob(ctx, namespace, id, nil, contentType, data)
}

// GetBlob reads the blob ref names in namespace, decoded, and checks its
// bytes against ref: a mismatch is an error marked [ErrBlobCorrupt]
// naming the blob and the task that wrote it. With an owner (a reference
// cairn resolves by itself in a task's payload: its input, a signal's
// payload, a step's or a child's output), the blob must be one owner
// wrote, as every such reference cairn writes is: a reference to another
// task's blob, forged into a payload, is answered as a blob that does not
// exist ([ErrNotFound]) and its bytes are never handed out.
func (s *Stage) GetBlob(ctx context.Context, namespace string, ref history.BlobRef, owner uuid.UUID) ([]byte, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	b, err := s.blobs.BlobGet(ctx, namespace, ref.Key)
	if err != nil {
		return nil, err
	}
	if owner != uuid.Nil && b.TaskID != owner {
		return nil, errmark.Mark(errors.Newf("blob %s: no such blob of task %s", ref.Key, owner), ErrNotFound)
	}
	data, err := s.decodeBlob(ctx, b)
	if err != nil {
		return nil, err
	}
	return CheckBlob(ref, b.TaskID, data)
}

// OpenBlob decodes the bytes of b, as a blob store read it, and checks
// them against the digest stored with it (for a reader without the
// reference: a download by key).
func (s *Stage) OpenBlob(ctx context.Context, b *Blob) (*Blob, error) {
	data, err := s.decodeBlob(ctx, b)
	if err != nil {
		return nil, err
	}
	opened := *b
	opened.Data = data
	return checkStored(&opened)
}

// decodeBlob returns b's bytes decoded.
func (s *Stage) decodeBlob(ctx context.Context, b *Blob) ([]byte, error) {
	p := &Payload{Namespace: b.Namespace, Task: b.TaskID, Kind: BlobData, Data: b.Data, BlobKey: b.Key, Archived: b.Archived}
	if err := s.Decode(ctx, []*Payload{p}); err != nil {
		return nil, err
	}
	if p.Err != nil {
		return nil, p.Err
	}
	return p.Data, nil
}
