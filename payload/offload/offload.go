// Package offload keeps payloads over a threshold out of the history: its
// [Codec] writes such a payload as a blob of its task and puts a
// reference in its place ({"cairn_blob": ref}, or a step's OutputRef),
// which reads resolve, checked against the reference's size and SHA-256.
// Its [Store] is where blobs go: the database's blobs table, or a
// directory or an S3-compatible bucket beside it whose objects the rows
// name.
//
// It imports payload, history and leaf helpers.
package offload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/payload"
)

// Codec is the [payload.Codec] that keeps a task's payloads of more than
// its threshold of bytes as blobs of the task: a start's input (written
// with the task, in its transaction; the reference carries the digest of
// the input's canonical JSON, which an idempotency key's reuse compares),
// a step's output (step_completed's OutputRef), a workflow's output, and
// the payload of a signal sent to a task by id. A schedule's input, and a
// signal sent by idempotency key, belong to no task: they stay in place.
//
// Its Decode reads references back (unless the payload keeps them,
// [payload.Payload.KeepRefs]): only a blob of the payload's own task (a
// child's output, of the child), checked; a reference whose blob cannot
// be read stays as it is, with the error on the payload. A blob over
// [payload.MaxBlobBytes] is refused with [payload.ErrTooLarge].
type Codec struct {
	threshold int
	kinds     []payload.Kind // kept by reference; empty: every kind a task owns
}

// New returns the codec keeping payloads of the kinds given (none given:
// inputs, step outputs, outputs and signals) of more than threshold bytes
// by reference: a writer chooses what it keeps so (the SDK's client its
// inputs and signals, its worker the outputs, not a child's input). With
// threshold 0 or less it keeps none, and only reads references back.
func New(threshold int, kinds ...payload.Kind) *Codec {
	return &Codec{threshold: threshold, kinds: slices.Clone(kinds)}
}

var _ payload.Codec = (*Codec)(nil)

// Threshold returns the codec's threshold (0: none).
func (c *Codec) Threshold() int { return max(c.threshold, 0) }

// Encode implements [payload.Codec].
func (c *Codec) Encode(ctx context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		if p.Task == uuid.Nil || c.threshold <= 0 || len(p.Data) <= c.threshold ||
			(len(c.kinds) > 0 && !slices.Contains(c.kinds, p.Kind)) {
			continue
		}
		switch p.Kind {
		case payload.Input:
			ref, err := p.PutBlob(ctx, "application/json", p.Data)
			if err != nil {
				return err
			}
			canonical, err := jsoncheck.Canonical(p.Data)
			if err != nil {
				canonical = p.Data
			}
			sum := sha256.Sum256(canonical)
			p.Data = history.InputEnvelope(ref, hex.EncodeToString(sum[:]))
		case payload.StepOutput:
			ref, err := p.PutBlob(ctx, "application/json", p.Data)
			if err != nil {
				return err
			}
			p.Data, p.Ref = nil, &ref
		case payload.Output, payload.Signal:
			ref, err := p.PutBlob(ctx, "application/json", p.Data)
			if err != nil {
				return err
			}
			p.Data = history.BlobEnvelope(ref)
		}
	}
	return nil
}

// Decode implements [payload.Codec].
func (c *Codec) Decode(ctx context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		if p.KeepRefs || p.Kind == payload.BlobData || p.Kind == payload.StreamChunk {
			continue
		}
		if p.Ref != nil {
			data, err := p.GetBlob(ctx, *p.Ref)
			if err != nil {
				p.Err = err
				continue
			}
			p.Data, p.Ref = data, nil // as if kept in place
			continue
		}
		ref, ok := history.ParseBlobEnvelope(p.Data)
		if !ok {
			continue
		}
		data, err := p.GetBlob(ctx, ref)
		if err != nil {
			p.Err = err
			continue
		}
		p.Data = data
	}
	return nil
}
