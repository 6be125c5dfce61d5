package payload_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
)

// mark is a codec that wraps each payload's data in its letter on the way
// in and takes it off on the way out: the order of a chain shows.
type mark struct {
	letter string
	fail   bool // Encode fails, but for a blob's bytes
}

func (m mark) Encode(_ context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		if m.fail && p.Kind != payload.BlobData {
			return errors.New("refused")
		}
		p.Data = []byte(m.letter + "(" + string(p.Data) + ")")
	}
	return nil
}

func (m mark) Decode(_ context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		s := string(p.Data)
		if len(s) < 3 || s[:2] != m.letter+"(" {
			p.Err = errors.Newf("not %s's", m.letter)
			continue
		}
		p.Data = []byte(s[2 : len(s)-1])
	}
	return nil
}

// memBlobs is a blob store in memory.
type memBlobs struct {
	blobs     map[string]*payload.Blob
	discarded []string
}

func (m *memBlobs) BlobPut(_ context.Context, b *payload.Blob) error {
	m.blobs[b.Key] = b
	return nil
}

func (m *memBlobs) BlobGet(_ context.Context, _ string, key string) (*payload.Blob, error) {
	b, ok := m.blobs[key]
	if !ok {
		return nil, payload.ErrNotFound
	}
	copied := *b
	return &copied, nil
}

func (m *memBlobs) BlobPrepare(_ context.Context, b *payload.Blob) (*payload.Blob, error) {
	return b, nil
}

func (m *memBlobs) BlobDiscard(_ context.Context, rows []*payload.Blob) {
	for _, b := range rows {
		m.discarded = append(m.discarded, b.Key)
	}
}

// A stage runs its codecs in the order given on the way in and in reverse
// on the way out; what it encoded is a copy the caller's payloads no
// longer change; a payload one codec cannot decode is passed by the ones
// after it, its error kept.
func TestStageChainsCodecsInOrderAndDecodesInReverse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stage := payload.NewStage(&memBlobs{blobs: map[string]*payload.Blob{}}, mark{letter: "a"}, mark{letter: "b"})
	p := &payload.Payload{Namespace: "default", Task: uuid.New(), Kind: payload.Output, Data: []byte("x")}
	enc, err := stage.Encode(ctx, []*payload.Payload{p})
	require.NoError(t, err)
	require.Equal(t, 1, enc.Len())
	require.Equal(t, "b(a(x))", string(enc.At(0).Data), "the first codec is the innermost")
	p.Data = []byte("changed")
	require.Equal(t, "b(a(x))", string(enc.At(0).Data), "the encoded copy is the stage's")

	back := enc.At(0)
	require.NoError(t, stage.Decode(ctx, []*payload.Payload{&back}))
	require.Equal(t, "x", string(back.Data))
	require.NoError(t, back.Err)

	odd := &payload.Payload{Kind: payload.Output, Data: []byte("a(y)")}
	require.NoError(t, stage.Decode(ctx, []*payload.Payload{odd}))
	require.ErrorContains(t, odd.Err, "not b's")
	require.Equal(t, "a(y)", string(odd.Data), "left as it was: the inner codec passed it by")
}

// A failed encoding discards the blobs it readied for starts.
func TestStageDiscardsWhatAFailedEncodingReadied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	blobs := &memBlobs{blobs: map[string]*payload.Blob{}}
	stage := payload.NewStage(blobs, keepAll{}, mark{letter: "b", fail: true})
	p := &payload.Payload{Namespace: "default", Task: uuid.New(), Kind: payload.Input, Data: []byte(`"big"`), Start: &payload.Start{}}
	_, err := stage.Encode(ctx, []*payload.Payload{p})
	require.ErrorContains(t, err, "refused")
	require.Len(t, blobs.discarded, 1)
}

// keepAll keeps every payload as a blob of its task.
type keepAll struct{}

func (keepAll) Encode(ctx context.Context, ps []*payload.Payload) error {
	for _, p := range ps {
		if p.Kind == payload.BlobData {
			continue
		}
		ref, err := p.PutBlob(ctx, "application/json", p.Data)
		if err != nil {
			return err
		}
		p.Data = history.BlobEnvelope(ref)
	}
	return nil
}

func (keepAll) Decode(context.Context, []*payload.Payload) error { return nil }

// GetBlob checks what it reads against the reference, and reads a blob
// for a task only when that task wrote it.
func TestGetBlobChecksTheBytesAndTheirOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	blobs := &memBlobs{blobs: map[string]*payload.Blob{}}
	stage := payload.NewStage(blobs)
	owner, other := uuid.New(), uuid.New()
	ref, err := stage.PutBlob(ctx, "default", owner, "text/plain", []byte("page"))
	require.NoError(t, err)

	data, err := stage.GetBlob(ctx, "default", ref, owner)
	require.NoError(t, err)
	require.Equal(t, "page", string(data))
	_, err = stage.GetBlob(ctx, "default", ref, other)
	require.ErrorIs(t, err, payload.ErrNotFound, "another task's blob is not found")

	blobs.blobs[ref.Key].Data = []byte("pagE")
	_, err = stage.GetBlob(ctx, "default", ref, uuid.Nil)
	require.ErrorIs(t, err, payload.ErrBlobCorrupt)
	_, err = stage.OpenBlob(ctx, blobs.blobs[ref.Key])
	require.ErrorIs(t, err, payload.ErrBlobCorrupt, "nor does the digest stored with it match")

	_, _, err = payload.NewBlob("default", owner, "", make([]byte, payload.MaxBlobBytes+1))
	require.ErrorIs(t, err, payload.ErrTooLarge)
}
