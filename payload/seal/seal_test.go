package seal_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
)

// memKeys keeps data keys in memory, as the tasks' rows would: a running
// task may be given one, a finished one may not.
type memKeys struct {
	mu      sync.Mutex
	keys    map[uuid.UUID][]byte
	running map[uuid.UUID]bool
}

func newMemKeys() *memKeys {
	return &memKeys{keys: map[uuid.UUID][]byte{}, running: map[uuid.UUID]bool{}}
}

func (m *memKeys) TaskDataKeys(_ context.Context, ids []uuid.UUID) (map[uuid.UUID][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uuid.UUID][]byte{}
	for _, id := range ids {
		if k, ok := m.keys[id]; ok {
			out[id] = k
		}
	}
	return out, nil
}

func (m *memKeys) TaskDataKeySet(_ context.Context, id uuid.UUID, key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.keys[id]; ok {
		return k, nil
	}
	if !m.running[id] {
		return nil, nil
	}
	m.keys[id] = key
	return key, nil
}

func keysOf(t *testing.T, ids ...string) (*seal.Keys, map[string]string) {
	t.Helper()
	raw := map[string]string{}
	var entries []seal.KeyEntry
	for _, id := range ids {
		k := make([]byte, 32)
		_, err := rand.Read(k)
		require.NoError(t, err)
		raw[id] = base64.StdEncoding.EncodeToString(k)
		entries = append(entries, seal.KeyEntry{ID: id, Key: raw[id]})
	}
	keys, err := seal.NewKeys(seal.Config{Namespaces: map[string]seal.NamespaceKeys{"default": {Current: ids[len(ids)-1], Keys: entries}}})
	require.NoError(t, err)
	return keys, raw
}

func stageOf(keys *seal.Keys, store seal.DataKeys) (*payload.Stage, *seal.Codec) {
	c := seal.New(keys, store)
	return payload.NewStage(nil, c), c
}

// Every payload of an encrypted namespace is sealed on the way in and
// opened on the way out: a new task's input under a data key of its own
// (which the start writes), a running task's outputs and signals under
// its key, a schedule's input under the namespace key. Another
// namespace's pass as they are.
func TestSealRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys, _ := keysOf(t, "k1")
	store := newMemKeys()
	stage, _ := stageOf(keys, store)
	id := uuid.New()
	start := &payload.Payload{Namespace: "default", Task: id, Kind: payload.Input, Data: []byte(`{"secret":1}`), Start: &payload.Start{Keyed: true}}
	enc, err := stage.Encode(ctx, []*payload.Payload{start})
	require.NoError(t, err)
	in := enc.At(0)
	sealed, ok := history.ParseSealed(in.Data)
	require.True(t, ok, "%s", in.Data)
	require.Equal(t, id.String(), sealed.Task)
	require.NotEmpty(t, sealed.Digest, "a keyed start's input carries its digest")
	require.NotEmpty(t, in.Start.DataKey)
	store.keys[id], store.running[id] = in.Start.DataKey, true // the start wrote them

	out := &payload.Payload{Namespace: "default", Task: id, Kind: payload.Output, Data: []byte(`"done"`)}
	sched := &payload.Payload{Namespace: "default", Kind: payload.ScheduleInput, Data: []byte(`{"every":"day"}`)}
	plain := &payload.Payload{Namespace: "other", Task: id, Kind: payload.Output, Data: []byte(`"clear"`)}
	enc, err = stage.Encode(ctx, []*payload.Payload{out, sched, plain})
	require.NoError(t, err)
	for i := range 2 {
		_, ok := history.ParseSealed(enc.At(i).Data)
		require.True(t, ok, "payload %d is sealed", i)
	}
	require.Equal(t, `"clear"`, string(enc.At(2).Data), "another namespace's payload passes")

	// A fresh codec (no key cached) opens them with the keys the store keeps.
	fresh, _ := stageOf(keys, store)
	back := []*payload.Payload{
		{Namespace: "default", Kind: payload.Input, Data: in.Data},
		{Namespace: "default", Kind: payload.Output, Data: enc.At(0).Data},
		{Namespace: "default", Kind: payload.ScheduleInput, Data: enc.At(1).Data},
	}
	require.NoError(t, fresh.Decode(ctx, back))
	require.Equal(t, `{"secret":1}`, string(back[0].Data))
	require.Equal(t, `"done"`, string(back[1].Data))
	require.Equal(t, `{"every":"day"}`, string(back[2].Data))

	// Without the keys, or once the key is gone, they stay sealed.
	blind := []*payload.Payload{{Namespace: "default", Kind: payload.Output, Data: enc.At(0).Data}}
	require.NoError(t, payload.NewStage(nil).Decode(ctx, blind))
	_, ok = history.ParseSealed(blind[0].Data)
	require.True(t, ok)
	delete(store.keys, id)
	gone, _ := stageOf(keys, store)
	erased := []*payload.Payload{{Namespace: "default", Kind: payload.Output, Data: enc.At(0).Data}}
	require.NoError(t, gone.Decode(ctx, erased))
	_, ok = history.ParseSealed(erased[0].Data)
	require.True(t, ok, "an erased task's payload stays sealed")
	require.NoError(t, erased[0].Err, "silently: readers show it sealed")
}

// Two starts of the same value (however its JSON is written) carry the
// same digest, another value another: what an idempotency key's reuse
// compares, without plaintext.
func TestSealedInputsCompareByDigest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys, _ := keysOf(t, "k1")
	stage, _ := stageOf(keys, newMemKeys())
	digest := func(input string) []byte {
		p := &payload.Payload{Namespace: "default", Task: uuid.New(), Kind: payload.Input, Data: []byte(input), Start: &payload.Start{Keyed: true}}
		enc, err := stage.Encode(ctx, []*payload.Payload{p})
		require.NoError(t, err)
		sealed, ok := history.ParseSealed(enc.At(0).Data)
		require.True(t, ok)
		return sealed.Digest
	}
	require.Equal(t, digest(`{"a":1,"b":[2.50]}`), digest(`{"b":[2.5], "a":1.0}`))
	require.NotEqual(t, digest(`{"a":1}`), digest(`{"a":2}`))
}

// A task without a data key (one a schedule started) gets one at its
// first payload; a finished one cannot, and its payload is sealed with the
// namespace key, for the store to refuse what carries it.
func TestSealGivesARunningTaskItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys, _ := keysOf(t, "k1")
	store := newMemKeys()
	stage, _ := stageOf(keys, store)
	running, finished := uuid.New(), uuid.New()
	store.running[running] = true
	ps := []*payload.Payload{
		{Namespace: "default", Task: running, Kind: payload.StepOutput, Data: []byte(`1`)},
		{Namespace: "default", Task: finished, Kind: payload.Signal, Data: []byte(`2`)},
	}
	enc, err := stage.Encode(ctx, ps)
	require.NoError(t, err)
	require.NotNil(t, store.keys[running], "the running task got its key")
	s0, _ := history.ParseSealed(enc.At(0).Data)
	require.Equal(t, running.String(), s0.Task)
	s1, _ := history.ParseSealed(enc.At(1).Data)
	require.NotEmpty(t, s1.Key, "the finished task's payload is sealed with the namespace key")
}

// A blob's bytes are sealed with its task's key and opened with it: from
// the store, or from an archive's record; an erased task's stay sealed,
// with an error that says so.
func TestSealedBlobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys, _ := keysOf(t, "k1")
	store := newMemKeys()
	stage, codec := stageOf(keys, store)
	id := uuid.New()
	store.running[id] = true
	p := &payload.Payload{Namespace: "default", Task: id, Kind: payload.BlobData, BlobKey: "b1", Data: []byte("scan")}
	enc, err := stage.Encode(ctx, []*payload.Payload{p})
	require.NoError(t, err)
	data := enc.At(0).Data
	require.True(t, seal.BlobSealed(data))

	open := func(archived *payload.Archived) *payload.Payload {
		p := &payload.Payload{Namespace: "default", Task: id, Kind: payload.BlobData, BlobKey: "b1", Data: data, Archived: archived}
		require.NoError(t, stage.Decode(ctx, []*payload.Payload{p}))
		return p
	}
	require.Equal(t, "scan", string(open(nil).Data))
	require.Equal(t, "scan", string(open(&payload.Archived{Task: id, DataKey: store.keys[id]}).Data))
	gone := open(&payload.Archived{Task: id})
	require.ErrorIs(t, gone.Err, payload.ErrSealed)
	require.ErrorContains(t, gone.Err, "erased")

	moved := &payload.Payload{Namespace: "default", Task: id, Kind: payload.BlobData, BlobKey: "b2", Data: data}
	require.NoError(t, stage.Decode(ctx, []*payload.Payload{moved}))
	require.ErrorIs(t, moved.Err, payload.ErrCorrupt, "bytes sealed for another blob do not open")

	delete(store.keys, id)
	codec.Forget(id)
	erased := open(nil)
	require.ErrorIs(t, erased.Err, payload.ErrSealed, "once the key is gone and forgotten")
}

// A key rotation: the current key wraps new tasks' keys, the old one
// still opens the tasks it wrapped, and keys without it leave those
// sealed.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, raw := keysOf(t, "k1")
	store := newMemKeys()
	oldStage, _ := stageOf(old, store)
	first := uuid.New()
	enc, err := oldStage.Encode(ctx, []*payload.Payload{{Namespace: "default", Task: first, Kind: payload.Input, Data: []byte(`1`), Start: &payload.Start{}}})
	require.NoError(t, err)
	store.keys[first] = enc.At(0).Start.DataKey
	sealedFirst := enc.At(0).Data

	rotated, err := seal.NewKeys(seal.Config{Namespaces: map[string]seal.NamespaceKeys{"default": {Current: "k2",
		Keys: []seal.KeyEntry{{ID: "k1", Key: raw["k1"]}, {ID: "k2", Key: base64.StdEncoding.EncodeToString(make([]byte, 32))}}}}})
	require.NoError(t, err)
	newStage, _ := stageOf(rotated, store)
	second := uuid.New()
	enc, err = newStage.Encode(ctx, []*payload.Payload{{Namespace: "default", Task: second, Kind: payload.Input, Data: []byte(`2`), Start: &payload.Start{}}})
	require.NoError(t, err)
	require.Contains(t, string(enc.At(0).Start.DataKey), "ck1:k2:", "the new current key wraps the new task's key")

	back := []*payload.Payload{{Namespace: "default", Kind: payload.Input, Data: sealedFirst}}
	require.NoError(t, newStage.Decode(ctx, back))
	require.Equal(t, "1", string(back[0].Data), "the old key still opens the old task")
}
