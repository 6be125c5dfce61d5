package offload_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/offload"
)

// memTable is a blobs table in memory.
type memTable struct{ rows map[string]*payload.Blob }

func (m *memTable) BlobPut(_ context.Context, b *payload.Blob) error {
	copied := *b
	m.rows[b.Key] = &copied
	return nil
}

func (m *memTable) BlobGet(_ context.Context, _ string, key string) (*payload.Blob, error) {
	b, ok := m.rows[key]
	if !ok {
		return nil, payload.ErrNotFound
	}
	copied := *b
	return &copied, nil
}

// A payload of a kind the codec keeps, over its threshold, becomes a
// reference to a blob of its task, in the form its event records (an
// envelope; a step's OutputRef; a start's input with its canonical
// digest); the rest stay in place: smaller ones, other kinds, payloads of
// no task. Decoding reads them back, unless the reader keeps references.
func TestOffloadKeepsLargePayloadsByReference(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := &memTable{rows: map[string]*payload.Blob{}}
	blobs, err := offload.NewStore(table, "")
	require.NoError(t, err)
	stage := payload.NewStage(blobs, offload.New(10, payload.Input, payload.StepOutput, payload.Output))
	id := uuid.New()
	big := []byte(`"` + strings.Repeat("x", 20) + `"`)
	ps := []*payload.Payload{
		{Namespace: "default", Task: id, Kind: payload.Input, Data: big, Start: &payload.Start{}},
		{Namespace: "default", Task: id, Kind: payload.StepOutput, Data: big},
		{Namespace: "default", Task: id, Kind: payload.Output, Data: big},
		{Namespace: "default", Task: id, Kind: payload.Output, Data: []byte(`1`)},
		{Namespace: "default", Task: id, Kind: payload.Signal, Data: big},
		{Namespace: "default", Kind: payload.ScheduleInput, Data: big},
	}
	enc, err := stage.Encode(ctx, ps)
	require.NoError(t, err)
	_, ok := history.EnvelopeCanonical(enc.At(0).Data)
	require.True(t, ok, "a start's input by reference carries its canonical digest")
	require.Len(t, enc.At(0).Start.Blobs, 1, "written with the task")
	require.Empty(t, enc.At(1).Data)
	require.NotNil(t, enc.At(1).Ref, "a step's output is its OutputRef")
	_, ok = history.ParseBlobEnvelope(enc.At(2).Data)
	require.True(t, ok)
	for i := 3; i < 6; i++ {
		require.Equal(t, string(ps[i].Data), string(enc.At(i).Data), "payload %d stays in place", i)
	}
	require.Len(t, table.rows, 2, "the step's and the output's blobs are written now")
	require.NoError(t, blobs.BlobPut(ctx, enc.At(0).Start.Blobs[0]), "the start writes its own")

	var back []*payload.Payload
	for i := range 3 {
		p := enc.At(i)
		p.Start = nil
		back = append(back, &p)
	}
	kept := *back[2]
	kept.KeepRefs = true
	back = append(back, &kept)
	require.NoError(t, stage.Decode(ctx, back))
	for i := range 3 {
		require.NoError(t, back[i].Err)
		require.Equal(t, string(big), string(back[i].Data), "payload %d read back", i)
		require.Nil(t, back[i].Ref)
	}
	_, ok = history.ParseBlobEnvelope(back[3].Data)
	require.True(t, ok, "a reader that keeps references gets the reference")

	// A reference to another task's blob is not read: it stays, with the
	// error on the payload.
	forged := &payload.Payload{Namespace: "default", Task: uuid.New(), Kind: payload.Output, Data: enc.At(2).Data}
	require.NoError(t, stage.Decode(ctx, []*payload.Payload{forged}))
	require.ErrorIs(t, forged.Err, payload.ErrNotFound)
	require.Equal(t, string(enc.At(2).Data), string(forged.Data))
}

// With a location, a blob's bytes go to the bucket and its row names it;
// reads follow the row, and a discard deletes the object.
func TestStoreKeepsBytesInABucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	location := "file://" + filepath.ToSlash(t.TempDir())
	table := &memTable{rows: map[string]*payload.Blob{}}
	blobs, err := offload.NewStore(table, location)
	require.NoError(t, err)
	id := uuid.New()
	_, b, err := payload.NewBlob("default", id, "text/plain", []byte("bytes"))
	require.NoError(t, err)
	require.NoError(t, blobs.BlobPut(ctx, b))
	row := table.rows[b.Key]
	require.Equal(t, location, row.Location)
	require.Empty(t, row.Data, "the row holds no data")
	require.EqualValues(t, 5, row.Size)
	got, err := blobs.BlobGet(ctx, "default", b.Key)
	require.NoError(t, err)
	require.Equal(t, "bytes", string(got.Data))
	reader, err := offload.NewStore(table, "")
	require.NoError(t, err)
	got, err = reader.BlobGet(ctx, "default", b.Key)
	require.NoError(t, err)
	require.Equal(t, "bytes", string(got.Data), "a store writing elsewhere reads where the row says")

	object, err := offload.Object(ctx, location, "default", id, b.Key)
	require.NoError(t, err)
	require.Equal(t, "bytes", string(object))
	blobs.BlobDiscard(ctx, []*payload.Blob{row})
	_, err = offload.Object(ctx, location, "default", id, b.Key)
	require.Error(t, err, "discarded")

	_, err = offload.NewStore(table, "ftp://nowhere")
	require.Error(t, err)
}
